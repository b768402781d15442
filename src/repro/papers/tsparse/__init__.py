"""tSparse (Zachariadis, Satpute, Gómez-Luna, Olivares; Computers & Electrical Engineering 88,
2020; artifact oresths/tSparse): SpGEMM over 8x8 bitmap tiles, the non-empty tile pairs multiplied
in half precision on tensor cores with fp32 accumulation.

tiles.py (the format, the symbolic phase, the CSR assembly), twin.py (the tile products' NumPy
twin), tile_mma.py (the Triton kernel), spgemm.py (the phases end to end), baselines.py (SciPy,
GraphBLAS, cuSPARSE through cupyx, torch), experiment.py, figures.py."""
