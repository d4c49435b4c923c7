#!/usr/bin/env python3
"""The bed's image pull model (issue 26): what a kubelet's image store does to pod start.

kwok's stages see only the pod, not which images its node already has, so this small
controller does that part. It owns, for the nodes that match --nodes:

- the images on each node, published in node.status.images as a real kubelet does: an
  image is there once a pod that uses it has started on the node (a pull Job's pod or any
  other pod), or when the puller starts and finds it running there already;
- the start of every pod bound to such a node: the kwok stage file, rendered with its pull
  gate on (cluster-up.sh with BED_IMAGE_PULL_DELAY, or a test's private kwok), holds a
  pod before it gets an IP until the puller has marked it (annotation
  bed.rollgate.test/image-pull). The mark says how long the pull takes; the puller adds
  that to the pod's start delay (kwok's pod-ready.stage.kwok.x-k8s.io/delay), so a pod
  whose images are all on the node starts as before and one that misses any waits the
  pull delay on top.

Pulls of one node run in parallel and one pull of an image serves every pod waiting for
it (a second pod waits only for the rest of it), as the kubelet's image manager does.
Image sizes are not modelled: every missing image takes --delay.

Opt-in, for tests of a pull that keeps failing (--job-pull-fails IMAGE, repeatable): a pod
owned by a Job (an image pull Job) that uses IMAGE is never marked, so it stays Pending as
a kubelet leaves a pod whose pull fails (ErrImagePull, back-off) until the Job's deadline
ends it. Other pods pull IMAGE as usual: a registry that only the DaemonSet's own pods can
reach (their pull secret), the case a pull-ahead that gives up after a few tries is for.

Loopback only (the kubeconfig's server); stopped by its pid (cluster-down.sh or the test
that started it). Logs one line per decision on stderr.
"""
import argparse
import http.client
import json
import queue
import re
import ssl
import sys
import threading
import time
import urllib.parse

MARK = "bed.rollgate.test/image-pull"
READY_DELAY = "pod-ready.stage.kwok.x-k8s.io/delay"


def log(msg):
    print(f"[bed-image-puller] {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def parse_duration_ms(text):
    """A Go duration as kwok reads it ("20s", "1.5s", "500ms", "1m30s") in milliseconds."""
    units = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
    parts = re.findall(r"([0-9.]+)(ms|s|m|h)", text or "")
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise ValueError(f"not a duration: {text!r}")
    return int(sum(float(n) * units[u] for n, u in parts))


def read_kubeconfig(path):
    """The few fields cluster-up.sh writes (file paths, one cluster, one user)."""
    fields = {}
    with open(path) as f:
        for line in f:
            key, _, value = line.strip().partition(": ")
            if key in ("server", "certificate-authority", "client-certificate", "client-key"):
                fields.setdefault(key, value.strip())
    url = urllib.parse.urlparse(fields["server"])
    if url.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"refusing a non-loopback API server: {fields['server']}")
    context = ssl.create_default_context(cafile=fields["certificate-authority"])
    context.load_cert_chain(fields["client-certificate"], fields["client-key"])
    return url.hostname, url.port or 443, context


class Api:
    def __init__(self, kubeconfig):
        self.host, self.port, self.context = read_kubeconfig(kubeconfig)

    def conn(self, timeout=30):
        return http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=timeout)

    def request(self, method, path, body=None, content_type="application/json"):
        c = self.conn()
        try:
            headers = {"Accept": "application/json"}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = content_type
            c.request(method, path, body=data, headers=headers)
            r = c.getresponse()
            payload = r.read()
            return r.status, (json.loads(payload) if payload else None)
        finally:
            c.close()

    def list_watch(self, path, on_event, on_list):
        """List, then watch from the list's resourceVersion; relist when the watch ends
        badly (410 Gone). on_list gets the listed items, on_event (type, object)."""
        while True:
            try:
                status, body = self.request("GET", path)
                if status != 200:
                    raise RuntimeError(f"list {path}: {status} {body}")
                on_list(body.get("items") or [])
                rv = body["metadata"]["resourceVersion"]
                while rv:
                    sep = "&" if "?" in path else "?"
                    c = self.conn(timeout=600)
                    c.request("GET", f"{path}{sep}watch=1&allowWatchBookmarks=true&resourceVersion={rv}"
                              "&timeoutSeconds=300", headers={"Accept": "application/json"})
                    r = c.getresponse()
                    if r.status != 200:
                        c.close()
                        rv = None
                        break
                    for line in r:
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            rv = None  # expired: relist
                            break
                        obj = event["object"]
                        rv = obj["metadata"].get("resourceVersion", rv)
                        if event["type"] != "BOOKMARK":
                            on_event(event["type"], obj)
                    c.close()
            except Exception as e:  # the API server restarting, a broken stream: start over
                log(f"watch {path}: {e!r}; relisting")
                time.sleep(1)


class Puller:
    def __init__(self, api, delay_ms, start_delay_ms, node_selector, job_pull_fails=()):
        self.api = api
        self.job_pull_fails = set(job_pull_fails)
        self.refused = set()  # uids of Job pods already logged as refused
        self.delay_ms = delay_ms
        self.start_delay_ms = start_delay_ms
        self.node_selector = node_selector
        self.lock = threading.Lock()
        self.nodes = {}  # name -> set of images the node publishes
        self.pulls = {}  # (node, image) -> monotonic time the pull finishes
        self.work = queue.Queue()  # pods to look at (objects)
        self.waiting = {}  # uid -> pod bound to a node not seen yet

    # ---- nodes ----
    def nodes_listed(self, items):
        with self.lock:
            self.nodes = {n["metadata"]["name"]: node_images(n) for n in items}
        self.retry_waiting()

    def node_event(self, kind, node):
        name = node["metadata"]["name"]
        with self.lock:
            if kind == "DELETED":
                self.nodes.pop(name, None)
            else:
                self.nodes[name] = self.nodes.get(name, set()) | node_images(node)
        self.retry_waiting()

    def retry_waiting(self):
        with self.lock:
            pods, self.waiting = list(self.waiting.values()), {}
        for pod in pods:
            self.work.put(pod)

    # ---- pods ----
    def pods_listed(self, items):
        for pod in items:
            self.work.put(pod)

    def pod_event(self, kind, pod):
        if kind == "DELETED":
            with self.lock:
                self.waiting.pop(pod["metadata"]["uid"], None)
        else:
            self.work.put(pod)

    def run(self):
        while True:
            pod = self.work.get()
            try:
                self.handle(pod)
            except Exception as e:
                log(f"pod {pod['metadata'].get('namespace')}/{pod['metadata']['name']}: {e!r}")

    def handle(self, pod):
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName")
        if not node or meta.get("deletionTimestamp"):
            return
        with self.lock:
            if node not in self.nodes:
                # Not ours (or not seen yet): a node event retries it.
                self.waiting[meta["uid"]] = pod
                return
        images = pod_images(pod)
        if status.get("phase") in ("Running", "Succeeded"):
            # Started: its images are on the node now.
            self.record(node, images)
            return
        annotations = meta.get("annotations") or {}
        if MARK in annotations or status.get("phase") == "Failed":
            return
        refused = images & self.job_pull_fails
        if refused and any(o.get("kind") == "Job" for o in meta.get("ownerReferences") or []):
            if meta["uid"] not in self.refused:
                self.refused.add(meta["uid"])
                log(f"pod {meta['namespace']}/{meta['name']} on {node}: pull of {sorted(refused)} fails (--job-pull-fails)")
            return
        now = time.monotonic()
        done = set()
        with self.lock:
            have = self.nodes[node]
            wait_ms = 0
            for image in images - have:
                finish = self.pulls.get((node, image))
                if finish is None:
                    finish = now + self.delay_ms / 1000
                    self.pulls[(node, image)] = finish
                if finish <= now:
                    # Pulled for a pod that went away before it started: on the node.
                    done.add(image)
                wait_ms = max(wait_ms, int((finish - now) * 1000))
        if done:
            self.record(node, done)
        try:
            base_ms = parse_duration_ms(annotations[READY_DELAY]) if READY_DELAY in annotations else self.start_delay_ms
        except ValueError:
            base_ms = self.start_delay_ms
        patch = {"metadata": {"annotations": {MARK: f"{wait_ms}ms", READY_DELAY: f"{base_ms + wait_ms}ms"}}}
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        code, body = self.api.request("PATCH", path, patch, "application/merge-patch+json")
        if code == 200:
            missing = sorted(images - have - done)
            log(f"pod {meta['namespace']}/{meta['name']} on {node}: pull {wait_ms} ms for {missing or 'nothing'}")
        elif code != 404:
            raise RuntimeError(f"marking the pod: {code} {body}")

    def record(self, node, images):
        with self.lock:
            have = self.nodes.get(node, set())
            new = images - have
            if not new:
                return
            self.nodes[node] = have | new
            listed = sorted(self.nodes[node])
        body = {"status": {"images": [{"names": [i], "sizeBytes": 1} for i in listed]}}
        code, reply = self.api.request(
            "PATCH", f"/api/v1/nodes/{node}/status", body, "application/merge-patch+json")
        if code == 200:
            log(f"node {node} has {sorted(new)}")
        elif code != 404:
            raise RuntimeError(f"publishing images of {node}: {code} {reply}")


def node_images(node):
    return {name for i in (node.get("status") or {}).get("images") or [] for name in i.get("names") or []}


def pod_images(pod):
    spec = pod.get("spec") or {}
    return {c["image"] for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--delay", required=True, help="pull time of a missing image (Go duration, e.g. 20s)")
    p.add_argument("--start-delay-ms", type=int, required=True,
                   help="the stage file's pod start delay, for pods without their own")
    p.add_argument("--nodes", required=True, help="label selector of the nodes modelled (kwok's own)")
    p.add_argument("--job-pull-fails", action="append", default=[], metavar="IMAGE",
                   help="pods of Jobs never pull IMAGE (stay Pending); other pods do (repeatable)")
    args = p.parse_args()
    api = Api(args.kubeconfig)
    puller = Puller(api, parse_duration_ms(args.delay), args.start_delay_ms, args.nodes,
                    args.job_pull_fails)
    selector = urllib.parse.quote(args.nodes)
    log(f"pull delay {args.delay} on nodes {args.nodes}")
    threading.Thread(target=api.list_watch, daemon=True, args=(
        f"/api/v1/nodes?labelSelector={selector}", puller.node_event, puller.nodes_listed)).start()
    threading.Thread(target=api.list_watch, daemon=True, args=(
        "/api/v1/pods?fieldSelector=spec.nodeName%21%3D", puller.pod_event, puller.pods_listed)).start()
    puller.run()


if __name__ == "__main__":
    main()
