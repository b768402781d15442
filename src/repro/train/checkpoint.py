"""Per-epoch training checkpoints: everything needed for a resumed run to end bit-identical to an
uninterrupted one (model, optimiser, hook state, RNG states, metrics so far), written atomically
so a run killed while saving keeps the previous checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import torch

from repro.atomic import atomic_write

VERSION = 1


class CheckpointMismatch(RuntimeError):
    """The checkpoint was written by a different configuration."""


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: Path, *, epoch: int, model, optimizer, hooks_state: dict, history: list[dict],
                    fingerprint: str, extra: dict | None = None) -> None:
    """``epoch`` = number of finished epochs; ``extra``: the trainer's other state (e.g. the
    lookahead average), stored only when given."""
    state = {
        "version": VERSION,
        "fingerprint": fingerprint,
        "epoch": epoch,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "hooks": hooks_state,
        "history": history,
        "rng": rng_state(),
    }
    if extra is not None:
        state["extra"] = extra
    atomic_write(Path(path), lambda fh: torch.save(state, fh))


def load_checkpoint(path: Path, fingerprint: str) -> dict | None:
    """The checkpoint at ``path`` (tensors on the CPU: RNG states must be, and load_state_dict moves
    the rest to the parameters' device), or None if there is none. Refuses one from another
    configuration."""
    path = Path(path)
    if not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("version") != VERSION or state.get("fingerprint") != fingerprint:
        raise CheckpointMismatch(
            f"{path} was written by a different training configuration (or code version); delete it to "
            "start over, or restore the configuration it was made with to resume")
    return state
