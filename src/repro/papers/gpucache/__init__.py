"""Graph model for GPU caching (Li et al., arXiv 1605.02043; the balanced edge partition model,
Li et al., SIGMETRICS 2017): data objects are vertices, tasks are edges joining the two data
objects they touch; a balanced partition of the edges over thread blocks that copies each vertex
into as few blocks as possible minimises the loads into per-block (per-SM) caches.

taskgraph.py   the task graph (validated) and the inputs: SpMV over meshes, power-law graphs and
               pyamg's small real matrices, a cfd-like flux loop over an unstructured mesh, the
               interacting pairs of a cutoff n-body step.
partition.py   the partitioners: default and random order, vertex partition (METIS through
               pymetis), the balanced edge partition (split-and-connect over METIS), hypergraph
               partition (Mt-KaHyPar).
schedule.py    a partition as an executed schedule: task order and data relabelling.
cache_model.py the model's outputs: replication factor and predicted cache-line loads.
edge_kernels.py  the three kernels: NumPy twins, the CPU run (torch) and the CUDA launches
               (kernels/gpucache_edges.cu).
experiment.py  the model experiment (CPU) and the reorder run (CPU at smoke, H200 at paper scale).
"""
