#!/usr/bin/env python3
"""Lowest number of healthy backends in rotation during a rollout, per Service, from the
lb-emulator's timeline (what the load balancer saw, not what the controller thinks).

usage: lb-capacity.py EMULATOR_ADDR SINCE_EVENT_INDEX NAMESPACE CLUSTER_ID SVC[:REPLICAS]...
"""
import json
import sys
import urllib.request


def get(addr, path):
    with urllib.request.urlopen(f"http://{addr}/_emulator/{path}", timeout=10) as r:
        return json.load(r)


def main():
    addr, since, ns, cluster = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    state = get(addr, "state")
    events = get(addr, "timeline")["events"]
    groups = state["clb"]["vserver_groups"] + state["nlb"]["server_groups"]
    print(f"{'Service':<12} {'replicas':>8} {'lowest healthy backends during the rollout':>44}")
    for arg in sys.argv[5:]:
        svc, replicas = arg.split(":")
        replicas = int(replicas)
        name = f"k8s/80/{svc}/{ns}/{cluster}"
        group = next(g["id"] for g in groups if g["name"] == name)
        # Backends present before the rollout were healthy and in rotation.
        backends = {}
        unknown = replicas
        lowest = replicas
        for e in events[since:]:
            if e["server_group_id"] != group:
                continue
            key = (e["ip"], e["port"])
            if key not in backends:
                was_there = e["event"] != "added"
                if was_there and unknown > 0:
                    unknown -= 1
                backends[key] = {"healthy": was_there, "in_rotation": True}
            b = backends[key]
            ev = e["event"]
            if ev == "added":
                b.update(healthy=False, in_rotation=True)
            elif ev == "healthy":
                b["healthy"] = True
            elif ev == "unhealthy":
                b["healthy"] = False
            elif ev == "removed":
                b.update(healthy=False, in_rotation=False)
            elif ev == "weight-changed":
                b["in_rotation"] = not e.get("detail", "").endswith("-> 0")
            now = unknown + sum(1 for x in backends.values() if x["healthy"] and x["in_rotation"])
            lowest = min(lowest, now)
        print(f"{svc:<12} {replicas:>8} {lowest:>44}")


if __name__ == "__main__":
    main()
