#!/usr/bin/env python3
"""Tests of soak-audit.py on fixture files: a consistent node passes, and
each planted problem is reported. soak.sh runs this before the soak; by hand:
    python3 hack/local-cluster/soak_audit_test.py"""
import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest

AUDIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "soak-audit.py")
NODE = "node-a"
WHOLE_UID = "11111111-1111-4111-8111-111111111111"
SHARE_UIDS = ["22222222-2222-4222-8222-222222222222", "33333333-3333-4333-8333-333333333333"]
STRAY_UID = "44444444-4444-4444-8444-444444444444"


def slices():
    return [{"spec": {"driver": "gpu.tangram.dev", "nodeName": NODE, "devices": [
        {"name": "gpu-0", "capacity": {"memory": {"value": "80Gi"}}},
        {"name": "gpu-1", "capacity": {"memory": {"value": "80Gi"}}},
    ]}}]


def claim(uid, name, device, memory=None, share_id=None, reserved=True):
    result = {"driver": "gpu.tangram.dev", "pool": NODE, "device": device, "request": "gpu"}
    if memory:
        result["consumedCapacity"] = {"memory": memory}
        result["shareID"] = share_id
    status = {"allocation": {"devices": {"results": [result]}}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": name + "-pod", "uid": "p-" + uid}]
    return {"metadata": {"namespace": "soak", "name": name, "uid": uid}, "status": status}


def record(name, device, memory=None, state="PrepareCompleted"):
    d = {"request": "gpu", "device": device}
    if memory:
        d["share"] = True
        d["memoryBytes"] = memory
    return {"state": state, "namespace": "soak", "name": name, "devices": [d]}


def consistent():
    """A node where everything agrees: one whole card, two 10Gi shares."""
    return {
        "claims": [
            claim(WHOLE_UID, "whole", "gpu-0"),
            claim(SHARE_UIDS[0], "share-a", "gpu-1", "10Gi", "s1"),
            claim(SHARE_UIDS[1], "share-b", "gpu-1", "10Gi", "s2"),
        ],
        "checkpoint": {
            WHOLE_UID: record("whole", "gpu-0"),
            SHARE_UIDS[0]: record("share-a", "gpu-1", 10 << 30),
            SHARE_UIDS[1]: record("share-b", "gpu-1", 10 << 30),
        },
        "cdi": [f"k8s.gpu.tangram.dev-claim_{u}.json" for u in [WHOLE_UID] + SHARE_UIDS] + ["unrelated.json"],
        "claimdirs": [f"mps/claims/{u}" for u in SHARE_UIDS] + ["mps/pipe", "mps/shm"],
    }


def plant(change):
    def planted():
        f = consistent()
        change(f)
        return f
    return planted


class SoakAuditTest(unittest.TestCase):
    def run_audit(self, fixture, checkpoint_file=True):
        with tempfile.TemporaryDirectory() as tmp:
            cp = os.path.join(tmp, "state", "checkpoint.json")
            os.makedirs(os.path.dirname(cp))
            if checkpoint_file:
                with open(cp, "w") as f:
                    json.dump({"version": "v1", "checksum": "x", "data": {"claims": fixture["checkpoint"]}}, f)
            cdi = os.path.join(tmp, "cdi")
            os.makedirs(cdi)
            for name in fixture["cdi"]:
                open(os.path.join(cdi, name), "w").close()
            for d in fixture["claimdirs"]:
                os.makedirs(os.path.join(tmp, d))
            for name, items in (("claims.json", fixture["claims"]), ("slices.json", slices())):
                with open(os.path.join(tmp, name), "w") as f:
                    json.dump({"items": items}, f)
            out = subprocess.run(
                [sys.executable, AUDIT, cp, cdi, NODE, os.path.join(tmp, "claims.json"),
                 os.path.join(tmp, "slices.json"), os.path.join(tmp, "state"), os.path.join(tmp, "mps")],
                capture_output=True, text=True, check=False)
            self.assertEqual(out.returncode, 0, out.stderr)
            return out.stdout.splitlines()

    def test_consistent_node_has_no_problems(self):
        self.assertEqual(self.run_audit(consistent()), [])

    def test_planted_problems_are_reported(self):
        cases = [
            ("orphan CDI spec", plant(lambda f: f["cdi"].append(f"k8s.gpu.tangram.dev-claim_{STRAY_UID}.json")),
             f"orphan CDI spec for claim {STRAY_UID}"),
            ("checkpointed claim without CDI spec", plant(lambda f: f["cdi"].remove(f"k8s.gpu.tangram.dev-claim_{WHOLE_UID}.json")),
             f"claim {WHOLE_UID} in the checkpoint has no CDI spec"),
            ("orphan per-claim directory", plant(lambda f: f["claimdirs"].append(f"mps/claims/{STRAY_UID}")),
             f"orphan per-claim entry"),
            ("reserved claim missing from the checkpoint", plant(lambda f: f["checkpoint"].pop(SHARE_UIDS[0])),
             f"claim soak/share-a ({SHARE_UIDS[0]}) is reserved for a pod on this node but not in the checkpoint"),
            ("checkpoint holds a claim nobody reserves", plant(lambda f: f["claims"][0]["status"].pop("reservedFor")),
             f"checkpoint holds claim soak/whole ({WHOLE_UID}), which is not reserved for a pod on this node"),
            ("checkpoint holds a claim being deleted", plant(lambda f: f["claims"][0]["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z")),
             "which is not reserved for a pod on this node"),
            ("half-prepared claim", plant(lambda f: f["checkpoint"][WHOLE_UID].update(state="PrepareStarted")),
             "claim soak/whole is PrepareStarted in the checkpoint"),
            ("checkpoint device differs from the allocation", plant(lambda f: f["checkpoint"][WHOLE_UID]["devices"][0].update(device="gpu-1")),
             "claim soak/whole: checkpoint devices ['gpu-1'] differ from its allocation ['gpu-0']"),
            ("card allocated whole and shared", plant(lambda f: f["claims"][1]["status"]["allocation"]["devices"]["results"][0].update(device="gpu-0")),
             "gpu-0 allocated whole to soak/whole and also to soak/share-a"),
            ("card allocated whole to two claims", plant(lambda f: f["claims"].append(claim(STRAY_UID, "whole-2", "gpu-0", reserved=False))),
             "gpu-0 allocated whole to soak/whole and also to soak/whole-2"),
            ("shares over capacity", plant(lambda f: f["claims"][2]["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"].update(memory="75Gi")),
             "gpu-1 over capacity (allocated): shares use 91268055040 bytes of 85899345920"),
            ("node prepared one card whole for two claims", plant(lambda f: f["checkpoint"].__setitem__(STRAY_UID, record("whole-2", "gpu-0"))),
             "gpu-0 prepared whole to soak/whole and also to soak/whole-2"),
            ("node prepared shares over capacity", plant(lambda f: f["checkpoint"][SHARE_UIDS[1]]["devices"][0].update(memoryBytes=75 << 30)),
             "gpu-1 over capacity (prepared)"),
        ]
        for name, fixture, want in cases:
            with self.subTest(name):
                got = self.run_audit(fixture())
                self.assertTrue(any(want in line for line in got), f"want a line with {want!r}, got {got}")

    def test_missing_checkpoint_file_means_nothing_prepared(self):
        got = self.run_audit(consistent(), checkpoint_file=False)
        self.assertIn(f"claim soak/whole ({WHOLE_UID}) is reserved for a pod on this node but not in the checkpoint", got)
        self.assertIn(f"orphan CDI spec for claim {WHOLE_UID}", got)

    def test_unreadable_input_fails_the_audit(self):
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "claims.json")
            with open(bad, "w") as f:
                f.write("not json")
            out = subprocess.run([sys.executable, AUDIT, "/nonexistent", tmp, NODE, bad, bad],
                                 capture_output=True, text=True, check=False)
            self.assertEqual(out.returncode, 2)
            self.assertIn("cannot audit", out.stderr)


if __name__ == "__main__":
    unittest.main()
