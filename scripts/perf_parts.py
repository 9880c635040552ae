#!/usr/bin/env python3
"""One run of a long edit on `serve` (called by scripts/perf-parts.sh): uploads INPUT,
makes Clip (the whole input) → Reframe 9:16 → Captions (a cue every 5 s) → Destination,
runs it and prints the seconds from the start request to the run's end.

  usage: perf_parts.py BASE_URL API_KEY INPUT MINUTES

Standard library only.
"""
import json
import sys
import time
import urllib.request

VIDEO_INPUT = "87a28532-ca1d-4652-9a23-a5b9d452e79a"
CLIP = "774577c0-7d6c-42fa-9f2d-fbc179081641"
REFRAME = "3c86da6e-c0b0-4ac6-a4e3-23ff638dceae"
CAPTIONS = "d4ad2388-2f79-4d9c-9cb1-b953460ffedb"
DESTINATION = "96600cea-d346-4a43-a262-cc54579cfe1e"
RUN_LIMIT_SECONDS = 3600

base, key, source, minutes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {key}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=600) as answer:
        return json.loads(answer.read() or b"null")


def upload():
    ticket = call("POST", "/uploads/video/get_upload_url")
    with open(source, "rb") as file:
        request = urllib.request.Request(ticket["upload_url"], data=file.read(), method="PUT")
    request.add_header("Content-Type", "video/mp4")
    urllib.request.urlopen(request, timeout=600).read()
    call("POST", "/uploads/video/finalize_upload", {"id": ticket["id"]})
    return ticket["id"]


def stamp(seconds):
    return "%02d:%02d:%02d,000" % (seconds // 3600, seconds // 60 % 60, seconds % 60)


def agent():
    srt = "".join(
        f"{i + 1}\n{stamp(s)} --> {stamp(s + 3)}\nCaption number {i + 1}\n\n"
        for i, s in enumerate(range(0, minutes * 60, 5))
    )
    created = call("POST", "/agent/create", {"name": "perf parts"})
    nodes = [
        ("in", VIDEO_INPUT, {}),
        ("clip", CLIP, {"start_ms": 0, "end_ms": minutes * 60_000}),
        ("reframe", REFRAME, {"aspect_ratio": "9:16", "mode": "crop"}),
        ("captions", CAPTIONS, {"srt": srt}),
        ("out", DESTINATION, {}),
    ]
    operations = [
        {"op": "create_node", "node_type_id": kind, "temp_ref_id": name, "params_used": params}
        for name, kind, params in nodes
    ]
    operations += [
        {"op": "create_connection", "source_temp_ref_id": a[0], "target_temp_ref_id": b[0]}
        for a, b in zip(nodes, nodes[1:])
    ]
    call("POST", f"/agent/{created['agent_id']}/update", {"operations": operations})
    return created["agent_id"]


def main():
    video, agent_id = upload(), agent()
    started = time.monotonic()
    run = call("POST", f"/agent/{agent_id}/run", {"video_ids": [video]})["run_id"]
    while time.monotonic() - started < RUN_LIMIT_SECONDS:
        record = call("GET", f"/agent_run/{run}")
        if record["status"] != "running":
            elapsed = time.monotonic() - started
            if record["status"] != "completed":
                sys.exit(f"the run ended {record['status']}: {record['status_message']}")
            print(f"{elapsed:.2f}")
            return
        time.sleep(0.2)
    sys.exit("the run did not end in time")


main()
