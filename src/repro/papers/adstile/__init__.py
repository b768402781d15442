"""ADS-Tile (Zhang et al., arXiv 2606.10303): isolation-aware scheduling of an autonomous-driving DNN
pipeline on tile-based accelerators; a SimPy model fed by DNN latency curves measured on SM partitions.

networks.py   the ADS DNN stand-ins (detection, segmentation, tracking, planning) and their sizes.
partition.py  SM partitions (CUDA green contexts) and the CPU stand-in (intra-op threads).
measure.py    the measuring loop: latency on k units, alone and co-running; takes the partition.
experiment.py the curves experiment (GPU at paper scale; no SimPy).
workload.py   chains, latency curves, execution-time variation.
scheduler.py  the SimPy model: five policies and the fewest-tiles search.
schedule.py   the schedule sweep and the tornados over the assumed parameters (CPU).
figures.py    the figures.
"""
