"""``edgeship matrix``: many models × targets × devices, locally or on a Ray cluster (run.py), from a
matrix file (spec.py), with devices measured on the nodes that own them (raydevice.py), lab nodes
(lab.py) and the matrix report (report.py)."""
