#!/usr/bin/env python3
"""Run-engine figures against `serve` (called by scripts/perf-runs.sh, which builds and
starts it). Each figure is a ratio or a difference against a floor measured in the same
run: the ffmpeg commands a person would write by hand for the same work.

  usage: perf_runs.py BASE_URL API_KEY WORK_DIR [--repeats N] [--starts N] [--long-seconds S]
                     [--only chain,fan,edit,first,wide,generation,avatar,charges,triggers,social] [--label TEXT] [--cpu NAME=PID,...]
                     [--free-base URL --free-key KEY --free-pid PID]

--free-base/--free-key/--free-pid name a second serve started with CREDIT_PRICES=free: the
charges rows run the same priced run on both, alternately, and report what charging adds
per task (--cpu's serve is the charging one).

--cpu names processes (serve, the emulators) whose own CPU time (not their children's:
ffmpeg is the floor's) the wide rows report per task, over the engine's runs only.

Prints markdown for docs/performance.md. Standard library only.
"""
import concurrent.futures
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time
import urllib.request

VIDEO_INPUT = "87a28532-ca1d-4652-9a23-a5b9d452e79a"
DESTINATION = "96600cea-d346-4a43-a262-cc54579cfe1e"
CLIP = "774577c0-7d6c-42fa-9f2d-fbc179081641"
REFRAME = "3c86da6e-c0b0-4ac6-a4e3-23ff638dceae"
IMAGE_GENERATION = "18b998a0-2ea7-4676-a5d3-3ae6c8ac0b72"
SCHEDULE = "ca4a4af1-9622-4018-ae48-a107c46bd14b"
# The local providers' font (GENERATION_FONT's default).
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
SPEED = "47a6bc12-618b-47a6-b0ad-7b3983640b2d"
ENCODE = ["-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-pix_fmt", "yuv420p",
          "-c:a", "aac", "-b:a", "128k", "-movflags", "+faststart"]
POLL_SECONDS = 0.1
ENDED = "completed,partial_complete,failed,cancelled"
# Longest a measured run may take before the script gives up.
RUN_LIMIT_SECONDS = 1800

base, key, work = sys.argv[1], sys.argv[2], sys.argv[3]
options = dict(zip(sys.argv[4::2], sys.argv[5::2]))
repeats = int(options.get("--repeats", 3))
starts = int(options.get("--starts", 20))
# The long video's length (a smoke run of the script may shorten it).
long_seconds = int(options.get("--long-seconds", 60))
only = set(options.get("--only", "chain,fan,edit,first,wide,generation,avatar,charges,triggers,social").split(","))
# Names the backend in the rows (perf-runs.sh measures the wide runs on both).
label = options.get("--label", "")
# name -> PID of the processes whose CPU per task the wide rows report.
cpu_pids = dict(entry.split("=", 1) for entry in options.get("--cpu", "").split(",") if "=" in entry)


def process_cpu(pid):
    """A process's own user + system CPU seconds so far (not its children's: ffmpeg's)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds():
    """Each named process's own user + system CPU seconds so far."""
    return {name: process_cpu(pid) for name, pid in cpu_pids.items()}


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {key}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read() or b"null")


def ffmpeg(*arguments):
    subprocess.run(["ffmpeg", "-v", "error", "-y", *arguments], check=True)


def upload(path):
    ticket = call("POST", "/uploads/video/get_upload_url")
    with open(path, "rb") as file:
        request = urllib.request.Request(ticket["upload_url"], data=file.read(), method="PUT",
                                         headers=ticket["upload_headers"])
        urllib.request.urlopen(request, timeout=300).read()
    call("POST", "/uploads/video/finalize_upload", {"id": ticket["id"]})
    return ticket["id"]


def agent(nodes, edges):
    """nodes: [(name, type, params)], edges: [(from, to)] -> agent ID."""
    created = call("POST", "/agent/create", {"name": "perf"})
    operations = [{"op": "create_node", "node_type_id": kind, "temp_ref_id": name, "params_used": params}
                  for name, kind, params in nodes]
    operations += [{"op": "create_connection", "source_temp_ref_id": a, "target_temp_ref_id": b} for a, b in edges]
    call("POST", f"/agent/{created['agent_id']}/update", {"operations": operations})
    return created["agent_id"]


def run(agent_id, video):
    """Seconds from the run's start to its end, by the run's own started_at and finished_at
    (milliseconds), so how often the script polls does not change the figure. It waits
    by asking for the agent's runs that started since the POST and have ended: while the
    run goes on that answer is empty and costs the server the same whatever the run's
    size, where a poll of the run itself renders the whole run (O(run) by the contract's
    record) and would load the server the figure is about more, the larger the run.
    `video`: an upload ID, or a list of them (one item each)."""
    started = time.perf_counter()
    videos = video if isinstance(video, list) else [video]
    since = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    # A generation-only agent (video None) takes no inputs.
    body = {} if video is None else {"video_ids": videos}
    run_id = call("POST", f"/agent/{agent_id}/run", body)["run_id"]
    ended = f"/agent_runs?agent_id={agent_id}&status={ENDED}&from={since}&limit=1"
    while time.perf_counter() - started < RUN_LIMIT_SECONDS:
        if any(listed["run_id"] == run_id for listed in call("GET", ended)["runs"]):
            record = call("GET", f"/agent_run/{run_id}")
            assert record["status"] == "completed", record
            return seconds_between(record["started_at"], record["finished_at"])
        time.sleep(POLL_SECONDS)
    raise SystemExit(f"run {run_id} did not finish in {RUN_LIMIT_SECONDS} s")


def seconds_between(start, end):
    parse = lambda text: datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (parse(end) - parse(start)).total_seconds()


def first_task(agent_id, video):
    """Seconds from POST to the first node seen running (or past it)."""
    started = time.perf_counter()
    run_id = call("POST", f"/agent/{agent_id}/run", {"video_ids": [video]})["run_id"]
    while time.perf_counter() - started < RUN_LIMIT_SECONDS:
        nodes = call("GET", f"/agent_run/{run_id}/nodes")["nodes"]
        if any(node["status"] in ("running", "completed", "failed") for node in nodes):
            seen = time.perf_counter() - started
            run_until_end(run_id)
            return seen
        time.sleep(0.001)
    raise SystemExit(f"run {run_id} never started a task")


def run_until_end(run_id):
    for _ in range(RUN_LIMIT_SECONDS * 10):
        if call("GET", f"/agent_run/{run_id}")["status"] != "running":
            return
        time.sleep(0.1)


def timed(function):
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def alternate(agent_id, video, floor, pairs=None, cpu=None):
    """`pairs` (default `repeats`) runs of the agent and of its floor, one after the
    other, so that drift on the machine touches both alike: (run seconds, floor seconds).
    Adds the named processes' CPU seconds over the runs (not the floors) to `cpu`."""
    runs, floors = [], []
    for _ in range(pairs or repeats):
        before = cpu_seconds()
        runs.append(run(agent_id, video))
        after = cpu_seconds()
        if cpu is not None:
            for name in after:
                cpu[name] = cpu.get(name, 0.0) + after[name] - before[name]
        floors.append(timed(floor))
    return runs, floors


def ffprobe(path):
    subprocess.run(["ffprobe", "-v", "error", "-show_format", "-show_streams", "-of", "json", path],
                   check=True, stdout=subprocess.DEVNULL)


def thumbnail(source, target):
    ffmpeg("-ss", "0.5", "-i", source, "-frames:v", "1", "-vf", "scale=320:-2", "-q:v", "4", target)


def input_floor(source):
    """What a Video Input task does with an upload it passes on: probe it, make its thumbnail."""
    ffprobe(source)
    thumbnail(source, f"{work}/input.jpg")


ms = lambda seconds: f"{seconds * 1000:,.1f} ms"
rows = []
short, long = f"{work}/short.mp4", f"{work}/long.mp4"
ffmpeg("-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30:duration=1", "-f", "lavfi", "-i",
       "sine=frequency=440:duration=1", "-shortest", *ENCODE, short)
short_id = upload(short)

if "chain" in only:
    # Engine overhead: Video Input -> 198 Clips of the whole second -> Destination. The
    # engine fuses the chain into one task: one encode.
    names = ["in"] + [f"clip{i}" for i in range(198)] + ["out"]
    nodes = [("in", VIDEO_INPUT, {})] + [(f"clip{i}", CLIP, {"start_ms": 0, "end_ms": 1000}) for i in range(198)]
    nodes.append(("out", DESTINATION, {}))
    wide = agent(nodes, list(zip(names, names[1:])))

    def short_floor():
        input_floor(short)
        ffmpeg("-i", short, *ENCODE, f"{work}/floor-short.mp4")
        ffprobe(f"{work}/floor-short.mp4")
        thumbnail(f"{work}/floor-short.mp4", f"{work}/floor-short.jpg")

    engine_runs, floors = alternate(wide, short_id, short_floor)
    overhead = (statistics.median(engine_runs) - statistics.median(floors)) / len(nodes)
    rows.append(f"| {len(nodes)}-node chain on a 1 s video (the Video Input task, then one fused task), started to finished, median of {repeats} | "
                f"{ms(statistics.median(engine_runs))} | {ms(statistics.median(floors))} (probe and thumbnail of the "
                f"input, encode, probe, thumbnail) | **{overhead * 1000:.2f} ms per node** |")

if "fan" in only:
    # The same without fusing: Video Input -> 99 x (Clip without a window -> Destination),
    # 99 tasks that pass the input on, each making its output's thumbnail. The floor is
    # the input's probe and thumbnail, then 99 thumbnails made by hand, as many at once as
    # serve has workers (one per core).
    BRANCHES = 99
    fan_nodes = [("in", VIDEO_INPUT, {})]
    fan_edges = []
    for i in range(BRANCHES):
        fan_nodes += [(f"clip{i}", CLIP, {}), (f"out{i}", DESTINATION, {})]
        fan_edges += [("in", f"clip{i}"), (f"clip{i}", f"out{i}")]
    fan = agent(fan_nodes, fan_edges)

    def fan_floor():
        input_floor(short)
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
            list(pool.map(lambda i: thumbnail(short, f"{work}/fan-{i}.jpg"), range(BRANCHES)))

    fan_runs, fan_floors = alternate(fan, short_id, fan_floor)
    fan_overhead = (statistics.median(fan_runs) - statistics.median(fan_floors)) / len(fan_nodes)
    rows.append(f"| {len(fan_nodes)}-node fan-out: {BRANCHES} tasks that pass the 1 s video on, each with a "
                f"thumbnail, median of {repeats} | {ms(statistics.median(fan_runs))} | "
                f"{ms(statistics.median(fan_floors))} (the input's probe and thumbnail, then {BRANCHES} thumbnails, "
                f"{os.cpu_count()} at once) | **{fan_overhead * 1000:.2f} ms per node** |")

if "wide" in only:
    # What one task costs as runs get wider: fan-outs of 10, 100 and 1,000 unfused tasks
    # (Video Input on N items -> B branches of Clip without a window -> Destination: N
    # input tasks and N x B branch tasks, each passing its item on with a thumbnail). The
    # floor is the same media work by hand (each item's probe and thumbnail, then a
    # thumbnail per branch task, as many at once as serve has workers); the figure is the
    # engine's time per task beyond it, and the 1,000-task figure against the 10-task one.
    def wide_agent(branches):
        nodes, edges = [("in", VIDEO_INPUT, {})], []
        for i in range(branches):
            nodes += [(f"clip{i}", CLIP, {}), (f"out{i}", DESTINATION, {})]
            edges += [("in", f"clip{i}"), (f"clip{i}", f"out{i}")]
        return agent(nodes, edges)

    items = [short_id] + [upload(short) for _ in range(9)]
    per_task = {}
    for tasks, count, branches in ((10, 1, 9), (100, 1, 99), (1000, 10, 99)):
        wide = wide_agent(branches)

        def wide_floor():
            with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
                list(pool.map(lambda i: input_floor(short), range(count)))
                list(pool.map(lambda i: thumbnail(short, f"{work}/wide-{i}.jpg"), range(count * branches)))

        # A small run's overhead is a few ms against a floor that moves by tens: more
        # pairs for the small runs (at least 10 for 10 tasks, 5 for 100).
        pairs = max(repeats, {10: 10, 100: 5}.get(tasks, repeats))
        cpu = {}
        wide_runs, wide_floors = alternate(wide, items[:count], wide_floor, pairs, cpu)
        per_task[tasks] = (statistics.median(wide_runs) - statistics.median(wide_floors)) / tasks
        rows.append(f"| {label}fan-out of {tasks:,} tasks ({count} item{'s' if count > 1 else ''} x {branches} "
                    f"branches and the input task{'s' if count > 1 else ''}), median of {pairs} | "
                    f"{ms(statistics.median(wide_runs))} | {ms(statistics.median(wide_floors))} (probe and thumbnail "
                    f"of each item, a thumbnail per branch task, {os.cpu_count()} at once) | "
                    f"**{per_task[tasks] * 1000:.2f} ms per task** |")
        if cpu:
            shares = ", ".join(f"{name} {seconds * 1000 / (pairs * tasks):.2f}" for name, seconds in cpu.items())
            rows.append(f"| {label}CPU per task of the {tasks:,}-task runs, ms (each process's own) | | | {shares} |")
    rows.append(f"| {label}per-task overhead, 1,000 tasks against 10 | | | "
                f"**{per_task[1000] / per_task[10]:.2f}×** |" if per_task[10] > 0 else
                f"| {label}per-task overhead, 1,000 tasks against 10 | | | 10-task overhead within noise |")

if "edit" in only:
    # A chain on 60 s of 1080p against one hand-written ffmpeg command.
    ffmpeg("-f", "lavfi", "-i", f"testsrc2=size=1920x1080:rate=30:duration={long_seconds}", "-f", "lavfi", "-i",
           f"sine=frequency=440:duration={long_seconds}", "-shortest", *ENCODE, long)
    long_id = upload(long)
    window = (long_seconds * 1000 // 12, long_seconds * 1000 * 11 // 12)
    chain = agent([("in", VIDEO_INPUT, {}), ("clip", CLIP, {"start_ms": window[0], "end_ms": window[1]}),
                   ("reframe", REFRAME, {"aspect_ratio": "9:16", "mode": "crop"}),
                   ("speed", SPEED, {"factor": 2}), ("out", DESTINATION, {})],
                  [("in", "clip"), ("clip", "reframe"), ("reframe", "speed"), ("speed", "out")])

    def long_floor():
        start, length = window[0] / 1000, (window[1] - window[0]) / 1000
        ffmpeg("-ss", str(start), "-t", str(length), "-i", long, "-vf", "crop=606:1080,setpts=PTS/2", "-af",
               "atempo=2", *ENCODE, f"{work}/floor-long.mp4")

    chain_runs, chain_floors = alternate(chain, long_id, long_floor)
    ratios = [a / b for a, b in zip(chain_runs, chain_floors)]
    rows.append(f"| Video Input → Clip → Reframe → Speed → Destination, {long_seconds} s 1080p, median of {repeats} | "
                f"{ms(statistics.median(chain_runs))} | {ms(statistics.median(chain_floors))} (one ffmpeg command) | "
                f"**{statistics.median(ratios):.2f}×** (pairs: {', '.join(f'{r:.2f}' for r in ratios)}) |")

if "generation" in only:
    # Generation-only runs: 20 Image Generation nodes (the local provider, 1024x1024),
    # each into a Destination, no input. The floor is the provider's own work by hand:
    # per image, the ffmpeg command it runs, the probe of the PNG and its thumbnail, as
    # many at once as serve has workers. The figure is the engine's time per node beyond it.
    IMAGES = 20
    gen_nodes, gen_edges = [], []
    for i in range(IMAGES):
        gen_nodes += [(f"image{i}", IMAGE_GENERATION, {"prompt": f"perf image {i}", "quality": "low"}),
                      (f"out{i}", DESTINATION, {})]
        gen_edges.append((f"image{i}", f"out{i}"))
    generation = agent(gen_nodes, gen_edges)

    def generation_floor():
        def one(i):
            folder = f"{work}/gen-{i}"
            os.makedirs(folder, exist_ok=True)
            with open(f"{folder}/prompt.txt", "w") as file:
                file.write(f"perf image {i}")
            drawn = (f"drawtext=fontfile='{FONT}':textfile=prompt.txt:expansion=none:fontcolor=white:fontsize=64:"
                     "line_spacing=21:box=1:boxcolor=black@0.35:boxborderw=32:x=(w-text_w)/2:y=(h-text_h)/2,format=rgb24")
            subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "color=c=0x406080:s=1024x1024:d=1",
                            "-vf", drawn, "-frames:v", "1", "-fflags", "+bitexact", "-flags:v", "+bitexact",
                            "image.png"], check=True, cwd=folder)
            ffprobe(f"{folder}/image.png")
            ffmpeg("-ss", "0", "-i", f"{folder}/image.png", "-frames:v", "1", "-vf", "scale=320:-2", "-q:v", "4",
                   f"{folder}/thumbnail.jpg")

        with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
            list(pool.map(one, range(IMAGES)))

    # The overhead is a few ms per node against a floor that moves by tens: 10 pairs at least.
    gen_pairs = max(repeats, 10)
    gen_runs, gen_floors = alternate(generation, None, generation_floor, gen_pairs)
    gen_overhead = (statistics.median(gen_runs) - statistics.median(gen_floors)) / len(gen_nodes)
    rows.append(f"| {label}generation-only run: {IMAGES} Image Generation nodes (local provider, 1024x1024) into "
                f"{IMAGES} Destinations, median of {gen_pairs} | {ms(statistics.median(gen_runs))} | "
                f"{ms(statistics.median(gen_floors))} (per image: the provider's ffmpeg command, probe, thumbnail; "
                f"{os.cpu_count()} at once) | **{gen_overhead * 1000:.2f} ms per node** |")

if "avatar" in only:
    # Avatar processing of a 10 s 720p video with a voice-like sound, from POST create to
    # `ready` seen (polled every 10 ms), against the commands it runs by hand: ffprobe of
    # the source, the loudness check, the 3 s 480 px preview.
    voice = "aevalsrc=0.5*sin(2*PI*220*t)*(0.6+0.4*sin(2*PI*3*t)):s=48000:d=10"
    speaking = f"{work}/speaking.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30:duration=10", "-f", "lavfi", "-i", voice,
           "-shortest", *ENCODE, speaking)
    speaking_id = upload(speaking)

    def process_avatar(number):
        started = time.perf_counter()
        created = call("POST", "/avatar-profiles/create",
                       {"name": f"perf {number} {time.time_ns()}", "sources": {"video_id": speaking_id}})
        while time.perf_counter() - started < RUN_LIMIT_SECONDS:
            profile = call("GET", f"/avatar-profiles/{created['id']}")
            if profile["status"] not in ("pending", "processing"):
                assert profile["status"] == "ready", profile
                return time.perf_counter() - started
            time.sleep(0.01)
        raise SystemExit("an avatar profile never finished processing")

    def avatar_floor():
        ffprobe(speaking)
        subprocess.run(["ffmpeg", "-nostats", "-i", speaking, "-vn", "-af",
                        "silencedetect=noise=-40dB:d=0.3,volumedetect", "-f", "null", "-"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ffmpeg("-t", "3", "-i", speaking, "-map", "0:v:0", "-map", "0:a:0?", "-vf",
               "scale=480:-2,setsar=1,format=yuv420p", *ENCODE, "-t", "3", f"{work}/preview.mp4")

    pairs = max(repeats, 5)
    avatar_runs, avatar_floors = [], []
    for number in range(pairs):
        avatar_runs.append(process_avatar(number))
        avatar_floors.append(timed(avatar_floor))
    ratios = [a / b for a, b in zip(avatar_runs, avatar_floors)]
    rows.append(f"| {label}avatar processing of a 10 s 720p video, POST create → ready, median of {pairs} | "
                f"{ms(statistics.median(avatar_runs))} | {ms(statistics.median(avatar_floors))} (ffprobe, the loudness "
                f"command, the preview command) | **{statistics.median(ratios):.2f}×** "
                f"(pairs: {', '.join(f'{r:.2f}' for r in ratios)}) |")

def on_server(server_base, server_key, function, *arguments):
    """`function(*arguments)` against another serve."""
    global base, key
    saved = (base, key)
    base, key = server_base, server_key
    try:
        return function(*arguments)
    finally:
        base, key = saved


if "charges" in only:
    # What charging adds: 100 Image Generation tasks of 4 credits each (the local
    # provider), on this serve (the catalog's prices: each claim reads the balance and
    # writes the charge with the claim) and on one started with CREDIT_PRICES=free (no
    # account read or write), alternately. Two figures, each the median over the pairs:
    # the serve process's own CPU per task (the engine's work, without ffmpeg's, which is
    # its children's), and the wall time per task, whose noise (ffmpeg on 2 cores) is
    # larger than what is measured.
    TASKS = 100
    charge_nodes = [(f"image{i}", IMAGE_GENERATION, {"prompt": f"charge {i}", "quality": "low"}) for i in range(TASKS)]
    free_base, free_key, free_pid = options["--free-base"], options["--free-key"], options["--free-pid"]
    charged_pid = cpu_pids["serve"]
    charged_agent = agent(charge_nodes, [])
    free_agent = on_server(free_base, free_key, agent, charge_nodes, [])
    charge_pairs = max(repeats, 10)
    walls, cpus, charged_cpu, free_cpu = [], [], [], []
    for _ in range(charge_pairs):
        before = process_cpu(charged_pid)
        charged_wall = run(charged_agent, None)
        charged = process_cpu(charged_pid) - before
        before = process_cpu(free_pid)
        free_wall = on_server(free_base, free_key, run, free_agent, None)
        free = process_cpu(free_pid) - before
        walls.append((charged_wall - free_wall) / TASKS)
        cpus.append((charged - free) / TASKS)
        charged_cpu.append(charged / TASKS)
        free_cpu.append(free / TASKS)
    charged_reasons = {entry["reason"] for entry in call("GET", "/credits/ledger?limit=100")["entries"]}
    free_reasons = {entry["reason"] for entry in on_server(free_base, free_key, call, "GET", "/credits/ledger?limit=100")["entries"]}
    assert "task_charge" in charged_reasons and "task_charge" not in free_reasons, (charged_reasons, free_reasons)
    rows.append(f"| {label}charging, engine CPU: serve's own CPU per task, {TASKS} Image Generation tasks (4 "
                f"credits each) charged vs. the same on a serve with CREDIT_PRICES=free, median of {charge_pairs} "
                f"pairs | {statistics.median(charged_cpu) * 1000:.2f} ms | {statistics.median(free_cpu) * 1000:.2f} ms "
                f"(zero-price catalog) | **{statistics.median(cpus) * 1000:+.2f} ms per task** |")
    rows.append(f"| {label}charging, wall time per task (same runs; ffmpeg's noise on 2 cores exceeds it) | | | "
                f"{statistics.median(walls) * 1000:+.2f} ms per task |")

if "first" in only:
    # POST -> first task running.
    single = agent([("in", VIDEO_INPUT, {}), ("out", DESTINATION, {})], [("in", "out")])
    latencies = sorted(first_task(single, short_id) for _ in range(starts))
    rows.append(f"| POST run → first task running, p50 / p90 of {starts} | "
                f"{ms(latencies[math.ceil(len(latencies) * 0.5) - 1])} / {ms(latencies[math.ceil(len(latencies) * 0.9) - 1])} | | |")

if "triggers" in only:
    # What starting a run through a trigger adds: a Schedule fired by hand (its state and
    # agent read, the run started, the state's write) against POST run of the same body
    # (the floor), alternately; the latency of each answer, median of the pairs. The
    # scheduler's tick starts a due trigger's run the same way, with a claim in the run's
    # write.
    body = {"video_ids": [short_id]}
    nodes = [("tick", SCHEDULE, {"cron": "0 0 1 1 *", "run_request": body}),
             ("in", VIDEO_INPUT, {}), ("out", DESTINATION, {})]
    fired_agent = agent(nodes, [("in", "out")])
    trigger_id = next(node["agent_node_id"] for node in call("GET", f"/agent/{fired_agent}")["agent_nodes"]
                      if node["node_type"]["node_type_id"] == SCHEDULE)
    trigger_pairs = max(starts, 30)
    fires, posts, ratios = [], [], []
    for _ in range(trigger_pairs):
        fire = timed(lambda: call("POST", f"/trigger/{trigger_id}/fire"))
        post = timed(lambda: call("POST", f"/agent/{fired_agent}/run", body))
        fires.append(fire)
        posts.append(post)
        ratios.append(fire / post)
    started_runs = call("GET", f"/trigger/{trigger_id}/runs?limit=100")["runs"]
    assert len(started_runs) == trigger_pairs and all(r["triggered_by"]["type"] == "manual" for r in started_runs)
    for listed in call("GET", f"/agent/{fired_agent}/runs?limit=100")["runs"]:
        run_until_end(listed["run_id"])
    rows.append(f"| {label}a run started by a trigger: POST /trigger/{{id}}/fire of a Schedule vs. POST run of the "
                f"same body, answer latency, median of {trigger_pairs} pairs | {ms(statistics.median(fires))} | "
                f"{ms(statistics.median(posts))} | **×{statistics.median(ratios):.2f}** |")

if "social" in only:
    # A social post's create: the medium (a run's output: the service's own link, read
    # from the store) probed, checked against the platform's limits and thumbnailed, the
    # post stored and queued for the sandbox publisher; against probing and thumbnailing
    # the same file by hand (the floor), alternately; median of the pairs.
    single = agent([("in", VIDEO_INPUT, {}), ("out", DESTINATION, {})], [("in", "out")])
    run(single, short_id)
    output = call("GET", f"/agent/{single}/runs?limit=1")["runs"][0]
    link = call("GET", f"/agent_run/{output['run_id']}")["outputs"][0]["video_url"]
    connection = call("POST", "/social/connections", {
        "platform": "youtube", "account_name": "Perf", "account_username": "perf",
        "profile_url": "https://www.youtube.com/@perf"})["social_connection_id"]
    post_pairs = max(starts, 20)
    posts, floors, ratios = [], [], []
    for i in range(post_pairs):
        body = {"description": f"perf {i}", "destinations": [{"social_connection_id": connection}],
                "media_urls": [link]}
        posted = timed(lambda: call("POST", "/social/post", body))
        floor = timed(lambda: input_floor(short))
        posts.append(posted)
        floors.append(floor)
        ratios.append(posted / floor)
    listed = call("GET", f"/social/posts?limit=100&social_connection_id={connection}")
    assert listed["pagination"]["returned"] == post_pairs, listed["pagination"]
    rows.append(f"| {label}POST /social/post of a 1 s output (read from the store, probed, limits checked, "
                f"thumbnailed, stored, queued) vs. ffprobe and a thumbnail of it by hand, median of {post_pairs} "
                f"pairs | {ms(statistics.median(posts))} | {ms(statistics.median(floors))} | "
                f"**×{statistics.median(ratios):.2f}** |")

print("| measurement | engine | floor | figure |")
print("|---|---|---|---|")
for row in rows:
    print(row)
