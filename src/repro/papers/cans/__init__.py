"""CANS (Wu, Zhang, Lin, Xu, Liu; arXiv 2606.09175): multi-user collaborative edge inference where
each device learns its DNN split point online and devices of a type share what they learn
(FedLinUCB-DW: federated LinUCB with grouping and a warm start). ``edge_load``: the latency surfaces
measured (device per-layer times; the edge's under 1..N concurrent clients); ``bandit``: the
policies as a model over them (claim cans.latency)."""
