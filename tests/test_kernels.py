"""repro.kernels: where cubins are looked for, and what a missing build says."""

from pathlib import Path

import pytest

from repro import kernels


def test_missing_cubin_says_how_to_build(tmp_path):
    with pytest.raises(FileNotFoundError, match="snakemake build_kernels"):
        kernels.module("tsm2r", 0, tmp_path)


def test_default_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("REPRO_KERNELS_DIR", str(tmp_path))
    assert kernels.default_dir() == tmp_path
    monkeypatch.delenv("REPRO_KERNELS_DIR")
    assert kernels.default_dir() == Path.cwd() / "results" / "build" / "kernels"


def test_the_module_cache_follows_the_folder_the_variable_names(monkeypatch, tmp_path):
    """Without a folder argument, a module loaded while $REPRO_KERNELS_DIR named one build is not served
    once it names another (a fake CuPy records which cubin each load read)."""
    import sys
    import types
    from contextlib import nullcontext

    loads = []
    cuda = types.SimpleNamespace(Device=lambda device: nullcontext())
    fake = types.SimpleNamespace(cuda=cuda, RawModule=lambda path: loads.append(path) or path)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(kernels, "_MODULES", {})
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "k.cubin").write_bytes(b"")
    monkeypatch.setenv("REPRO_KERNELS_DIR", str(tmp_path / "a"))
    assert kernels.module("k", 0) == str(tmp_path / "a" / "k.cubin")
    assert kernels.module("k", 0) == str(tmp_path / "a" / "k.cubin") and len(loads) == 1  # a hit
    monkeypatch.setenv("REPRO_KERNELS_DIR", str(tmp_path / "b"))
    assert kernels.module("k", 0) == str(tmp_path / "b" / "k.cubin")
    assert loads == [str(tmp_path / "a" / "k.cubin"), str(tmp_path / "b" / "k.cubin")]


class _FakeDevice:
    """cupy.cuda.Device's stand-in: entering it makes its device's stream (500 + id) CuPy's current one."""
    stream = [500]

    def __init__(self, device):
        self.device = device

    def __enter__(self):
        self.stream.insert(0, 500 + self.device)

    def __exit__(self, *exc):
        self.stream.pop(0)


def _fake_driver(monkeypatch):
    """A cupy.cuda.driver stand-in whose launchKernel reads the argument block as the driver would:
    the array of pointers, each to its argument's bytes."""
    import ctypes
    import sys
    import types

    launched = []

    def launchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        launched.append(dict(f=f, grid=(gx, gy, gz), block=(bx, by, bz), shared=shared, stream=stream,
                             extra=extra, params=params))

    driver = types.SimpleNamespace(launchKernel=launchKernel)
    runtime = types.SimpleNamespace(getDevice=lambda: 0)
    cuda = types.SimpleNamespace(driver=driver, runtime=runtime, Device=_FakeDevice,
                                 get_current_stream=lambda: types.SimpleNamespace(ptr=_FakeDevice.stream[0]))
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    return launched, ctypes


def test_a_launch_passes_its_argument_block_and_the_rewritten_slots(monkeypatch):
    import numpy as np

    launched, ctypes = _fake_driver(monkeypatch)
    fn = type("Fn", (), {"ptr": 4242})()
    args = (np.int32(-7), np.uint32(3_000_000_000), np.int64(-(2**40)), np.uint64(2**63 + 5), np.float32(0.5),
            np.float64(-2.25))
    launch = kernels.Launch(fn, (3, 2), (128,), args, shared_mem=1024)
    assert launch.values() == [-7, 3_000_000_000, -(2**40), 2**63 + 5, 0.5, -2.25]
    launch.slots[3].value = 0xDEAD_BEEF_0000
    launch.slots[0].value = True  # a flag given as a bool
    launch(77)
    (call,) = launched
    assert (call["f"], call["grid"], call["block"], call["shared"], call["stream"], call["extra"]) == (
        4242, (3, 2, 1), (128, 1, 1), 1024, 77, 0)
    pointers = (ctypes.c_void_p * 6).from_address(call["params"])  # what cuLaunchKernel reads
    read = [ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_float, ctypes.c_double]
    assert [t.from_address(p).value for t, p in zip(read, pointers)] == [
        1, 3_000_000_000, -(2**40), 0xDEAD_BEEF_0000, 0.5, -2.25]


def test_a_launch_starts_on_the_current_stream_entering_another_device_only_when_asked(monkeypatch):
    import numpy as np

    launched, _ = _fake_driver(monkeypatch)
    launch = kernels.Launch(type("Fn", (), {"ptr": 1})(), (1,), (32,), (np.int32(1),))
    launch.start(False, 0)  # the current device (the fake's 0): CuPy's current stream, no context entered
    launch.start(False, 2)  # another device: launched inside its context, on its stream
    launch.start(False, 0)  # the stream function kept from the first start still follows the current stream
    assert [c["stream"] for c in launched] == [500, 502, 500]


def test_a_launch_refuses_arguments_it_cannot_pass(monkeypatch):
    import numpy as np

    _fake_driver(monkeypatch)
    with pytest.raises(TypeError, match=r"1: int16, 2: object"):
        kernels.Launch(type("Fn", (), {"ptr": 1})(), (1,), (32,), (np.int32(1), np.int16(2), object()))


def test_function_pointer_reads_a_raw_kernel_or_a_function():
    kernel = type("Function", (), {"ptr": 99})()
    assert kernels.function_pointer(type("RawKernel", (), {"kernel": kernel})()) == 99
    assert kernels.function_pointer(kernel) == 99
