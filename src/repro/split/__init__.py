"""Device-edge split inference: what every paper that splits a DNN between a weak device and an edge
server needs (Edgent, ScissionLite, CANS), measured once.

- :mod:`repro.split.exits`: networks as a flat list of split points with early-exit heads (an
  AlexNet-style CIFAR net, a CIFAR ResNet).
- :mod:`repro.split.profile`: per-layer latency on a real processor (the CPU at a chosen number of
  threads, or a GPU through CUDA events), each layer's FLOPs and the exact bytes of the tensor that
  crosses the network at every split point.
- :mod:`repro.split.predict`: per-layer-type regression latency predictors fitted on profiles.
- :mod:`repro.split.optimise`: the latency of each (exit, split) configuration (device part +
  transfer + edge part), the search for the most accurate configuration under a deadline, and the
  exhaustive search it is checked against.
- :mod:`repro.split.train`: joint training of every exit (the BranchyNet loss).
- :mod:`repro.split.traces`: bandwidth traces with regime changes, from ``repro.sim.network``.
"""
