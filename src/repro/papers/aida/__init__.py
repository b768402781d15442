"""AIDA (Yavits, Kaplan, Ginosar, arXiv 1901.04976): associative in-memory inference of sparse FC
layers, as an analytical model set against EIE (Han et al., ISCA 2016) on EIE's benchmark layers."""
