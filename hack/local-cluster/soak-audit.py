#!/usr/bin/env python3
"""Independent audit for soak.sh: compares what the kubelet plugin keeps on
the node (checkpoint, CDI specs) with what the API server holds, and checks
no card is over capacity or given whole to one claim and to another.

usage: soak-audit.py CHECKPOINT CDI_DIR NODE CLAIMS_JSON SLICES_JSON
Prints one line per problem; nothing when all is well."""
import json
import os
import re
import sys

DRIVER = "gpu.tangram.dev"


def main():
    checkpoint_path, cdi_dir, node, claims_path, slices_path = sys.argv[1:6]
    problems = []
    with open(claims_path) as f:
        claims = json.load(f)["items"]
    with open(slices_path) as f:
        slices = json.load(f)["items"]
    try:
        with open(checkpoint_path) as f:
            checkpoint = json.load(f)["data"]["claims"] or {}
    except FileNotFoundError:
        checkpoint = {}

    # Cards of this node: memory capacity by device name.
    memory = {}
    for s in slices:
        spec = s["spec"]
        if spec.get("driver") != DRIVER or spec.get("nodeName") != node:
            continue
        for d in spec.get("devices", []):
            memory[d["name"]] = parse_quantity(d.get("capacity", {}).get("memory", {}).get("value", "0"))

    # Claims the plugin must have prepared: allocated on this node and
    # reserved for a pod (the kubelet prepares before the pod starts).
    expected = {}
    holdings = {}  # device -> list of (claim, whole, bytes)
    for c in claims:
        alloc = (c.get("status") or {}).get("allocation")
        if not alloc:
            continue
        ours = [r for r in alloc["devices"].get("results", []) if r["driver"] == DRIVER and r["pool"] == node]
        if not ours:
            continue
        key = c["metadata"]["namespace"] + "/" + c["metadata"]["name"]
        if c["status"].get("reservedFor") and not c["metadata"].get("deletionTimestamp"):
            expected[c["metadata"]["uid"]] = (key, sorted(r["device"] for r in ours))
        for r in ours:
            if r.get("adminAccess"):
                continue
            used = r.get("consumedCapacity", {}).get("memory")
            nbytes = parse_quantity(used) if used else memory.get(r["device"], 0)
            whole = not r.get("shareID") or nbytes >= memory.get(r["device"], 0) - (256 << 20)
            holdings.setdefault(r["device"], []).append((key, whole, nbytes))

    for device, held in sorted(holdings.items()):
        wholes = [h for h in held if h[1]]
        if wholes and len(held) > 1:
            problems.append(f"{device} held whole by {wholes[0][0]} and also by {', '.join(h[0] for h in held if h is not wholes[0])}")
        total = sum(h[2] for h in held if not h[1])
        if device in memory and total > memory[device]:
            problems.append(f"{device} over capacity: shares use {total} bytes of {memory[device]}")

    for uid, (key, devices) in sorted(expected.items()):
        rec = checkpoint.get(uid)
        if rec is None:
            problems.append(f"claim {key} ({uid}) is reserved for a pod on this node but not in the checkpoint")
            continue
        if rec.get("state") != "PrepareCompleted":
            problems.append(f"claim {key} is {rec.get('state')} in the checkpoint")
        if sorted(d["device"] for d in rec.get("devices", [])) != devices:
            problems.append(f"claim {key}: checkpoint devices {[d['device'] for d in rec.get('devices', [])]} differ from its allocation {devices}")
    for uid, rec in sorted(checkpoint.items()):
        if uid not in expected:
            problems.append(f"checkpoint holds claim {rec.get('namespace')}/{rec.get('name')} ({uid}), which is not reserved for a pod on this node")

    specs = set()
    for name in os.listdir(cdi_dir) if os.path.isdir(cdi_dir) else []:
        m = re.fullmatch(r"k8s\.gpu\.tangram\.dev-claim_(.+)\.json", name)
        if m:
            specs.add(m.group(1))
    for uid in sorted(specs - set(checkpoint)):
        problems.append(f"orphan CDI spec for claim {uid}")
    for uid in sorted(set(checkpoint) - specs):
        problems.append(f"claim {uid} in the checkpoint has no CDI spec")

    for p in problems:
        print(p)


SUFFIXES = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def parse_quantity(q):
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(q))
    if not m:
        raise ValueError(f"quantity {q!r}")
    return int(float(m.group(1)) * SUFFIXES.get(m.group(2), 1))


if __name__ == "__main__":
    main()
