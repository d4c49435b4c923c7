#!/usr/bin/env python3
"""Prints the server group behind port 80 of a Service's CLB as the lb-emulator holds it,
one backend a line, and fails unless it holds exactly the Service's pods, each
registered as the ENI holding its IP (what the demo says it shows).

usage: lb-server-group.py EMULATOR_ADDR NAMESPACE SERVICE APP_LABEL
"""
import importlib.util
import json
import os
import subprocess
import sys

# The group is found as hack/lb-capacity.py finds it: by the Service's EXTERNAL-IP.
spec = importlib.util.spec_from_file_location(
    "lb_capacity", os.path.join(os.path.dirname(__file__), "lb-capacity.py"))
lb_capacity = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lb_capacity)


def main():
    addr, ns, svc, app = sys.argv[1:5]
    state = lb_capacity.get(addr, "state")
    group_id = lb_capacity.group_of(state, ns, svc)
    group = next(g for g in state["clb"]["vserver_groups"] if g["id"] == group_id)
    pods = json.loads(subprocess.run(
        ["kubectl", "-n", ns, "get", "pod", "-l", f"app={app}", "-o", "json"],
        check=True, capture_output=True, text=True).stdout)["items"]
    pod_ips = {p["status"].get("podIP") for p in pods if p["status"].get("podIP")}
    print(f"{'GROUP':<16} {'TYPE':<5} {'SERVER':<24} {'IP':<15} {'PORT':>5} HEALTH")
    for b in group["backends"]:
        print(f"{group_id:<16} {b['type']:<5} {b['server_id']:<24} {b['ip']:<15} "
              f"{b['port']:>5} {b['health']}")
    backend_ips = {b["ip"] for b in group["backends"]}
    wrong = [b for b in group["backends"] if b["type"].lower() != "eni"]
    if not group["backends"] or backend_ips != pod_ips or wrong:
        sys.exit(f"server group {group_id} of {ns}/{svc} does not hold exactly the pods "
                 f"of app={app} as ENIs: backends {sorted(backend_ips)}, pods {sorted(pod_ips)}, "
                 f"not ENI: {[b['server_id'] for b in wrong]}")


if __name__ == "__main__":
    main()
