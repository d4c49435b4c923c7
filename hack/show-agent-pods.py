"""Prints the node agent's GET /pods answer (read from stdin) one pod a line: image and
the OTA conditions. Used by the demo; `PREFIX` limits it to pods whose name starts so."""
import json
import os
import sys

prefix = os.environ.get("PREFIX", "")
for pod in json.load(sys.stdin)["items"]:
    meta = pod["metadata"]
    if not meta["name"].startswith(prefix):
        continue
    conditions = {c["type"]: c for c in pod.get("status", {}).get("conditions", [])}
    need = conditions.get("PodNeedUpgrade", {})
    line = "  {}/{}  image={}  PodNeedUpgrade={} ({})".format(
        meta["namespace"], meta["name"], pod["spec"]["containers"][0]["image"],
        need.get("status"), need.get("message"))
    image_ready = conditions.get("PodImageReady")
    if image_ready:
        line += "  PodImageReady={} ({})".format(image_ready["status"], image_ready.get("reason", ""))
    print(line)
