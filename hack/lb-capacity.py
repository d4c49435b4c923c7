#!/usr/bin/env python3
"""Lowest number of healthy backends in rotation during a rollout, per Service, from the
lb-emulator's timeline (what the load balancer saw, not what the controller thinks).

usage: lb-capacity.py EMULATOR_ADDR SINCE_EVENT_INDEX NAMESPACE SVC:SERVING[:FLOOR]...

SERVING is how many healthy backends the Service had when the rollout began. With a
FLOOR, the script fails when the lowest point went below it (the demo's claim). Each
Service's group is the one its load balancer's port-80 listener forwards to: the load
balancer is found by the Service's EXTERNAL-IP (kubectl, with the caller's KUBECONFIG).
"""
import json
import subprocess
import sys
import urllib.request


def get(addr, path):
    with urllib.request.urlopen(f"http://{addr}/_emulator/{path}", timeout=10) as r:
        return json.load(r)


def group_of(state, ns, svc):
    """The server group behind port 80 of the Service's load balancer."""
    address = subprocess.run(
        ["kubectl", "-n", ns, "get", "service", svc, "-o",
         "jsonpath={.status.loadBalancer.ingress[0].ip}"],
        check=True, capture_output=True, text=True).stdout.strip()
    for lb in state["clb"]["load_balancers"]:
        if lb["address"] == address:
            for listener in lb["listeners"]:
                if listener["port"] == 80 and listener.get("vserver_group_id"):
                    return listener["vserver_group_id"]
    sys.exit(f"no CLB listener on port 80 at {address!r} for Service {ns}/{svc}")


def main():
    addr, since, ns = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    state = get(addr, "state")
    events = get(addr, "timeline")["events"]
    print(f"{'Service':<12} {'serving':>8} {'lowest healthy backends during the rollout':>44}")
    below_floor = []
    for arg in sys.argv[4:]:
        svc, replicas, *floor = arg.split(":")
        replicas = int(replicas)
        group = group_of(state, ns, svc)
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
        if floor and lowest < int(floor[0]):
            below_floor.append(f"{svc}: lowest {lowest}, below its floor {floor[0]}")
    if below_floor:
        sys.exit("healthy backends went below the floor: " + "; ".join(below_floor))


if __name__ == "__main__":
    main()
