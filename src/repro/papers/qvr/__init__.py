"""Q-VR (Xie et al., ASPLOS 2021, arXiv 2102.13191): foveated collaborative mobile VR rendering
(fovea on the headset's GPU, periphery on a remote server, a runtime controller sizing the fovea),
as a discrete-event model on :mod:`repro.sim` (claim ``qvr``; results are labelled ``model``)."""
