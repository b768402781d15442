"""OO-VR (Xie et al., arXiv 2001.03537): object-oriented VR rendering on a NUMA multi-GPU, as a
discrete-event model on :mod:`repro.sim` (claim ``oovr``; results are labelled ``model``)."""
