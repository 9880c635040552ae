#!/usr/bin/env python3
"""Webhook figures against `serve` (called by scripts/perf-webhooks.sh, which builds and
starts it), with a receiver in this process.

  latency:    a node finishing (the event's occurred_at, the time its change was stored)
              to its RUN_PROGRESS arriving at the receiver, over the completions of
              --runs pass-through runs; floor: the same payloads POSTed straight to the
              receiver (send to arrival).
  throughput: --deliveries delivered webhooks redelivered at once; deliveries per second
              from the first redeliver request to the last arrival; floor: the same
              number of POSTs sent straight to the receiver by as many threads as serve
              has senders.

  usage: perf_webhooks.py BASE_URL API_KEY WORK_DIR [--runs N] [--deliveries N]

Prints markdown for docs/performance.md. Standard library only.
"""
import concurrent.futures
import datetime
import http.server
import json
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

VIDEO_INPUT = "87a28532-ca1d-4652-9a23-a5b9d452e79a"
DESTINATION = "96600cea-d346-4a43-a262-cc54579cfe1e"
SENDERS = 8  # shared::serve::workers::WEBHOOK_SENDERS
LIMIT_SECONDS = 600

base, key, work = sys.argv[1], sys.argv[2], sys.argv[3]
options = dict(zip(sys.argv[4::2], sys.argv[5::2]))
runs = int(options.get("--runs", 100))
deliveries = int(options.get("--deliveries", 1000))

arrivals = []  # (arrival time, body)
arrivals_lock = threading.Lock()


class Receiver(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        now = time.time()
        with arrivals_lock:
            arrivals.append((now, body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *arguments):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
threading.Thread(target=server.serve_forever, daemon=True).start()
receiver = f"http://127.0.0.1:{server.server_address[1]}/hooks"


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {key}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read() or b"null")


def post_straight(body):
    request = urllib.request.Request(receiver, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    sent = time.time()
    urllib.request.urlopen(request, timeout=60).read()
    return sent


def timestamp(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def percentile(values, share):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def wait_for(condition, what):
    started = time.time()
    while time.time() - started < LIMIT_SECONDS:
        if condition():
            return
        time.sleep(0.05)
    raise SystemExit(f"{what}: not within {LIMIT_SECONDS} s")


# A small real video and a pass-through agent: its events are what is measured.
video_path = f"{work}/video.mp4"
subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=duration=2:size=320x240:rate=25",
                "-f", "lavfi", "-i", "sine=duration=2", "-shortest", "-c:v", "libx264", "-pix_fmt", "yuv420p",
                "-c:a", "aac", video_path], check=True)
ticket = call("POST", "/uploads/video/get_upload_url")
with open(video_path, "rb") as file:
    urllib.request.urlopen(urllib.request.Request(ticket["upload_url"], data=file.read(), method="PUT",
                                                  headers=ticket["upload_headers"])).read()
call("POST", "/uploads/video/finalize_upload", {"id": ticket["id"]})
created = call("POST", "/agent/create", {"name": "perf-webhooks"})
agent_id = created["agent_id"]
call("POST", f"/agent/{agent_id}/update", {"operations": [
    {"op": "create_node", "node_type_id": VIDEO_INPUT, "temp_ref_id": "in"},
    {"op": "create_node", "node_type_id": DESTINATION, "temp_ref_id": "out"},
    {"op": "create_connection", "source_temp_ref_id": "in", "target_temp_ref_id": "out"},
]})

# Latency: runs a few at a time, every event received.
run_ids = []
with concurrent.futures.ThreadPoolExecutor(4) as pool:
    run_ids = list(pool.map(lambda _: call("POST", f"/agent/{agent_id}/run",
                                             {"video_ids": [ticket["id"]], "callback_url": receiver})["run_id"],
                            range(runs)))


def finished_count():
    with arrivals_lock:
        return sum(1 for _, body in arrivals if json.loads(body)["flag"] == "RUN_FINISHED")


wait_for(lambda: finished_count() >= runs, "every RUN_FINISHED")
latencies = []
with arrivals_lock:
    received = list(arrivals)
for arrived, body in received:
    event = json.loads(body)
    if event["flag"] == "RUN_PROGRESS" and any(node["status"] == "completed" for node in event["updated_nodes"]):
        latencies.append((arrived - timestamp(event["occurred_at"])) * 1000)
floor = []
for _, body in received[:len(latencies)]:
    sent = post_straight(body)
    with arrivals_lock:
        floor.append((arrivals[-1][0] - sent) * 1000)

# Throughput: redeliver delivered webhooks all at once.
targets = []
for run_id in run_ids:
    for delivery in call("GET", f"/agent_run/{run_id}/webhooks")["deliveries"]:
        targets.append((run_id, delivery["delivery_id"]))
targets = targets[:deliveries]
with arrivals_lock:
    before = len(arrivals)
started = time.time()
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    list(pool.map(lambda target: call("POST", f"/agent_run/{target[0]}/webhooks/{target[1]}/redeliver"), targets))
wait_for(lambda: len(arrivals) >= before + len(targets), "every redelivery")
with arrivals_lock:
    last = max(arrived for arrived, _ in arrivals[before:])
sender_rate = len(targets) / (last - started)
bodies = [body for _, body in received[:len(targets)]]
bodies = (bodies * (len(targets) // max(1, len(bodies)) + 1))[:len(targets)]
started = time.time()
with concurrent.futures.ThreadPoolExecutor(SENDERS) as pool:
    list(pool.map(post_straight, bodies))
floor_rate = len(bodies) / (time.time() - started)

print()
print(f"| figure | serve | floor (straight to the receiver) | ratio |")
print(f"|---|---|---|---|")
print(f"| node finished → RUN_PROGRESS arrived, p50 ({len(latencies)} events) | {percentile(latencies, 0.5):.1f} ms "
      f"| {percentile(floor, 0.5):.2f} ms | — |")
print(f"| node finished → RUN_PROGRESS arrived, p99 | {percentile(latencies, 0.99):.1f} ms "
      f"| {percentile(floor, 0.99):.2f} ms | — |")
print(f"| webhooks per second, {len(targets)} redelivered at once ({SENDERS} senders) | {sender_rate:.0f}/s "
      f"| {floor_rate:.0f}/s | {floor_rate / sender_rate:.2f}× |")
