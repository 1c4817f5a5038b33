#!/usr/bin/env python3
"""Writes an ibsim topology: a two-level fat tree of N HCAs.

    fat_tree.py N [HCAS_PER_LEAF]  > net.fatN
    fat_tree.py --drop-ports N [HCAS_PER_LEAF]

N / HCAS_PER_LEAF (default 8) leaf switches, each with its HCAs on ports
1..HCAS_PER_LEAF and one link up to each spine switch on the ports after
them; max(2, leaves / 2) spines, spine S's port L going down to leaf L. HCAs
are Hca1..HcaN (HcaK behind Leaf((K-1) / HCAS_PER_LEAF + 1)), so a scenario
names them as for the other topologies. Leaf1 is defined first: OpenSM,
started without SIM_HOST, attaches to the first node of the file. With 8
HCAs a leaf: 64 HCAs are 8 leaves (12 ports: 8 down, 4 up) and 4 spines;
128 HCAs are 16 leaves (16 ports: 8 down, 8 up) and 8 spines, as a
two-level fat tree of a small cluster is cabled. Each line of the fabric is
a link both ends name, as ibsim's parser wants.

--drop-ports prints the ports where the scenarios with drops make ibsim
lose packets: both ends of every link of Spine1 (packets entering Spine1
from each leaf, and entering each leaf from Spine1), so about 1/spines of
the paths between leaves cross two lossy ports.
"""
import sys


def fat_tree(n, per_leaf):
    if n < 2 or n % per_leaf:
        raise SystemExit(f"fat_tree.py: N ({n}) must be a multiple of {per_leaf}, at least 2")
    leaves = n // per_leaf
    spines = max(2, leaves // 2)
    out = [
        f"# A two-level fat tree of {n} HCAs (c-tests/ibfabric/fat_tree.py {n} {per_leaf}):",
        f"# {leaves} leaves of {per_leaf} HCAs, {spines} spines, each leaf linked once to each spine.",
        "",
    ]
    for leaf in range(1, leaves + 1):
        out.append(f'Switch\t{per_leaf + spines} "Leaf{leaf}"')
        for p in range(1, per_leaf + 1):
            out.append(f'[{p}]\t"Hca{(leaf - 1) * per_leaf + p}"[1]')
        for s in range(1, spines + 1):
            out.append(f'[{per_leaf + s}]\t"Spine{s}"[{leaf}]')
        out.append("")
    for s in range(1, spines + 1):
        out.append(f'Switch\t{leaves} "Spine{s}"')
        for leaf in range(1, leaves + 1):
            out.append(f'[{leaf}]\t"Leaf{leaf}"[{per_leaf + s}]')
        out.append("")
    for h in range(1, n + 1):
        leaf, port = (h - 1) // per_leaf + 1, (h - 1) % per_leaf + 1
        out.append(f'Hca\t1 "Hca{h}"')
        out.append(f'[1]\t"Leaf{leaf}"[{port}]')
        out.append("")
    return "\n".join(out)


def drop_ports(n, per_leaf):
    leaves = n // per_leaf
    ports = [f'"Spine1"[{leaf}]' for leaf in range(1, leaves + 1)]
    ports += [f'"Leaf{leaf}"[{per_leaf + 1}]' for leaf in range(1, leaves + 1)]
    return " ".join(ports)


def main():
    args = sys.argv[1:]
    drops = bool(args) and args[0] == "--drop-ports"
    if drops:
        args = args[1:]
    if len(args) not in (1, 2):
        raise SystemExit(__doc__)
    n, per_leaf = int(args[0]), int(args[1]) if len(args) == 2 else 8
    print(drop_ports(n, per_leaf) if drops else fat_tree(n, per_leaf))


if __name__ == "__main__":
    main()
