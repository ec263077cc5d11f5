#!/usr/bin/env python3
"""Independent audit for soak.sh: compares what the kubelet plugin keeps on
the node (checkpoint, CDI specs, per-claim files and directories) with what
the API server holds, and checks no card is over capacity or given whole to
one claim and to another. It reads files only, nothing of the plugin's code.

usage: soak-audit.py CHECKPOINT CDI_DIR NODE CLAIMS_JSON SLICES_JSON [CLAIM_ROOT...]
  CLAIMS_JSON, SLICES_JSON  `kubectl get resourceclaims -A -o json`,
                            `kubectl get resourceslices -o json`
  CLAIM_ROOT                directories (e.g. the plugin's state and MPS
                            roots) searched for entries named after a claim
                            UID; each must belong to a checkpointed claim
Prints one line per problem; nothing when all is well. Exits 0 when the audit
ran (problems or not), 2 when it could not read its inputs."""
import json
import os
import re
import sys

DRIVER = "gpu.tangram.dev"
CDI_SPEC = re.compile(r"k8s\.gpu\.tangram\.dev-claim_(.+)\.json")
UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# A share within this much of the card's memory is the card (the plugin's
# own reserve for the MPS server is smaller).
WHOLE_SLACK = 256 << 20
# How deep below a CLAIM_ROOT per-claim entries are looked for.
CLAIM_ROOT_DEPTH = 3


def audit(checkpoint, cdi_specs, node, claims, slices, claim_entries):
    """Pure: the problems found. checkpoint is the checkpoint's data.claims
    (UID -> record), cdi_specs the file names in the CDI directory,
    claim_entries the paths found below the claim roots."""
    problems = []

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
            used = (r.get("consumedCapacity") or {}).get("memory")
            nbytes = parse_quantity(used) if used else memory.get(r["device"], 0)
            whole = not r.get("shareID") or nbytes >= memory.get(r["device"], 0) - WHOLE_SLACK
            holdings.setdefault(r["device"], []).append((key, whole, nbytes))
    problems += card_problems("allocated", holdings, memory)

    # The same for what the node prepared, from the checkpoint alone.
    prepared = {}
    for uid, rec in sorted(checkpoint.items()):
        key = f"{rec.get('namespace')}/{rec.get('name')}"
        for d in rec.get("devices") or []:
            if d.get("adminAccess"):
                continue
            nbytes = d.get("memoryBytes") or memory.get(d["device"], 0)
            whole = not d.get("share") or nbytes >= memory.get(d["device"], 0) - WHOLE_SLACK
            prepared.setdefault(d["device"], []).append((key, whole, nbytes))
    problems += card_problems("prepared", prepared, memory)

    for uid, (key, devices) in sorted(expected.items()):
        rec = checkpoint.get(uid)
        if rec is None:
            problems.append(f"claim {key} ({uid}) is reserved for a pod on this node but not in the checkpoint")
            continue
        if rec.get("state") != "PrepareCompleted":
            problems.append(f"claim {key} is {rec.get('state')} in the checkpoint")
        got = sorted(d["device"] for d in rec.get("devices") or [])
        if got != devices:
            problems.append(f"claim {key}: checkpoint devices {got} differ from its allocation {devices}")
    for uid, rec in sorted(checkpoint.items()):
        if uid not in expected:
            problems.append(
                f"checkpoint holds claim {rec.get('namespace')}/{rec.get('name')} ({uid}), which is not reserved for a pod on this node")

    specs = set()
    for name in cdi_specs:
        m = CDI_SPEC.fullmatch(name)
        if m:
            specs.add(m.group(1))
    for uid in sorted(specs - set(checkpoint)):
        problems.append(f"orphan CDI spec for claim {uid}")
    for uid in sorted(set(checkpoint) - specs):
        problems.append(f"claim {uid} in the checkpoint has no CDI spec")

    for path in sorted(claim_entries):
        for uid in UID.findall(os.path.basename(path)):
            if uid not in checkpoint:
                problems.append(f"orphan per-claim entry {path} (claim {uid} is not in the checkpoint)")
    return problems


def card_problems(what, holdings, memory):
    """holdings: device -> [(claim, whole, bytes)]. A card held whole must
    have no other holder; shares must fit the card's memory."""
    problems = []
    for device, held in sorted(holdings.items()):
        wholes = [h for h in held if h[1]]
        if wholes and len(held) > 1:
            others = ", ".join(h[0] for h in held if h is not wholes[0])
            problems.append(f"{device} {what} whole to {wholes[0][0]} and also to {others}")
        total = sum(h[2] for h in held if not h[1])
        if device in memory and total > memory[device]:
            problems.append(f"{device} over capacity ({what}): shares use {total} bytes of {memory[device]}")
    return problems


SUFFIXES = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def parse_quantity(q):
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?", str(q))
    if not m:
        raise ValueError(f"cannot parse quantity {q!r}")
    return int(float(m.group(1)) * SUFFIXES.get(m.group(2) or "", 1))


def claim_entries(roots):
    """Paths up to CLAIM_ROOT_DEPTH below each root."""
    found = []
    for root in roots:
        root = root.rstrip("/")
        for dirpath, dirnames, filenames in os.walk(root):
            depth = dirpath[len(root):].count(os.sep)
            if depth >= CLAIM_ROOT_DEPTH:
                dirnames[:] = []
            found += [os.path.join(dirpath, n) for n in dirnames + filenames]
    return found


def main(argv):
    if len(argv) < 5:
        sys.exit(__doc__)
    checkpoint_path, cdi_dir, node, claims_path, slices_path = argv[:5]
    try:
        with open(claims_path) as f:
            claims = json.load(f)["items"]
        with open(slices_path) as f:
            slices = json.load(f)["items"]
        try:
            with open(checkpoint_path) as f:
                checkpoint = json.load(f)["data"]["claims"] or {}
        except FileNotFoundError:
            checkpoint = {}
        specs = os.listdir(cdi_dir) if os.path.isdir(cdi_dir) else []
        problems = audit(checkpoint, specs, node, claims, slices, claim_entries(argv[5:]))
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"soak-audit: cannot audit: {e!r}", file=sys.stderr)
        sys.exit(2)
    for p in problems:
        print(p)


if __name__ == "__main__":
    main(sys.argv[1:])
