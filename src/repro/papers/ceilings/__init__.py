"""Machine ceilings: what this machine's memory, interconnect and matrix units can do.

Every kernel benchmark reports its result as a fraction of these measured numbers rather than
of datasheet values."""
