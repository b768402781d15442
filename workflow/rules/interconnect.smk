# GPU interconnect evaluation (Li et al., TPDS 2020): P2P bandwidth and latency, host-device copies,
# NCCL collectives (the collective experiment starts one process per GPU itself; gloo on the CPU).
use rule experiment as interconnect with:
    wildcard_constraints:
        paper="interconnect",
        exp=experiments("interconnect"),
