"""Caramel (Hashemi, Abdu Jyothi, Godfrey, Campbell; arXiv 2004.14020): model-aware all-reduce scheduling.

Measured gradient timelines (``timeline``), Caramel's plan as a DDP bucket assignment plus a chunking
communication hook (``plan``, ``hook``), and a SimPy model of ring all-reduce over a link fed by the
timelines (``links``, ``model``; claim ``caramel.model``, results labelled ``model``), validated against
gloo runs on CPU processes (``gloo``)."""
