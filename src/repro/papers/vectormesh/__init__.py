"""VectorMesh (Lin, Chen, Yang, Chien, ISCAS 2021): a mesh of tile execution units. Its claims wait
for the mesh's and the baselines' sizes (pending); what runs is the design-space tool's access
counts of baseline accelerators on the paper's workload classes (``baselines``)."""
