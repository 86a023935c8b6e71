#!/usr/bin/env bash
# Where a hit's CPU goes, for kcat, one stage and two stages: `perf record` samples sorted into
# librdkafka's consumer and producer, the kernel, libc, the vDSO, the Swift runtime and
# trackpipe's own code, as microseconds per input hit; `perf stat` totals; and the broker's CPU
# per hit. Medians of alternating rounds (the machine is shared: compare columns within a run).
#
#   scripts/cpu-breakdown.sh [--trackpipe PATH] [--bench PATH] [--rounds N] [--count N]
#                            [--partitions P] [--keep DIR]
#
# It starts `trackpipe-bench pipeline --hold --recent` itself (an embedded broker in its own
# process, preloaded, with fresh groups) and runs, per round and contender, one `perf stat`
# and one `perf record`, each with a group of its own. Needs root (perf, uprobes) and python3.
#
# How librdkafka's samples are split (it is stripped, and has no frame pointers):
# - on trackpipe's threads, by DWARF call chain (`--call-graph dwarf`; the .eh_frame survives
#   stripping): the nearest caller among KafkaConsumer/ConsumerBatch or rd_kafka_consumer_poll
#   (consumer) and KafkaProducer or rd_kafka_produceva/poll/flush (producer);
# - on librdkafka's own threads (rdk:main, rdk:broker*), by the client that made them: a uprobe
#   on rd_kafka_new records its type argument (0 producer, 1 consumer), and every thread the
#   calling thread forks before rd_kafka_new returns, or that such a thread forks, is that
#   client's. TopicAdmin and RecordDeleter are producer-type clients: their threads count as
#   the producer's (they idle through a run).
set -euo pipefail
cd "$(dirname "$0")/.."
trackpipe=.build/release/trackpipe
bench=.build/release/trackpipe-bench
rounds=3
count=400000
partitions=32
keep=""
while [ $# -gt 0 ]; do
    case "$1" in
    --trackpipe) trackpipe="$2"; shift 2 ;;
    --bench) bench="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --count) count="$2"; shift 2 ;;
    --partitions) partitions="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 64 ;;
    esac
done
trackpipe=$(realpath "$trackpipe")
work=${keep:-$(mktemp -d)}
mkdir -p "$work"
librdkafka=$(ldd "$trackpipe" | awk '/librdkafka/ { print $3 }')
hold=""
probes=()
cleanup() {
    [ -n "$hold" ] && kill -INT "$hold" 2>/dev/null && wait "$hold" 2>/dev/null
    for p in "${probes[@]}"; do perf probe -q -d "$p" 2>/dev/null || true; done
    [ -z "$keep" ] && rm -rf "$work"
    return 0
}
trap cleanup EXIT

# Two groups per round and stage contender: one for perf stat, one for perf record.
"$bench" pipeline --hold --recent --count "$count" --partitions "$partitions" --rounds $((2 * rounds)) \
    --contenders kcat,two,one --trackpipe "$trackpipe" > "$work/hold.out" 2> "$work/hold.err" &
hold=$!
until grep -q '^holding' "$work/hold.out" 2>/dev/null; do
    kill -0 "$hold" 2>/dev/null || { cat "$work/hold.err" >&2; exit 1; }
    sleep 1
done
read -r brokers broker_pid < <(sed -nE 's/^broker: ([^ ]+) \(pid ([0-9]+)\).*/\1 \2/p' "$work/hold.out")
read -ra groups < <(sed -nE 's/.*fresh groups for the contenders: //p' "$work/hold.out")

# The broker's CPU so far, in ns: its threads' run time (they live as long as it does).
broker_ns() { cat /proc/"$broker_pid"/task/*/schedstat | awk '{ s += $1 } END { print s }'; }

# A contender's command line as the benchmark printed it, with a fresh group (kcat: a new name).
command_for() { # contender, group
    case "$1" in
    kcat) sed -nE 's/^kcat: +//p' "$work/hold.out" | sed -e "s/kcat-NAME/kcat-$2/" -e 's/ *> *\/dev\/null//' ;;
    two) sed -nE 's/^two stages: +//p' "$work/hold.out" | sed "s/${groups[0]}/$2/" ;;
    one) sed -nE 's/^one stage: +//p' "$work/hold.out" | sed "s/${groups[0]}/$2/" ;;
    esac
}

perf probe -q -d 'probe_librdkafka:tpcb_*' 2> /dev/null || true # left over from an interrupted run
for p in 'tpcb_new=rd_kafka_new type=%di:s32' 'tpcb_newret=rd_kafka_new%return'; do
    perf probe -q -x "$librdkafka" --add "$p"
    probes+=("probe_librdkafka:${p%%=*}*")
done
events=(-e cpu-clock -e probe_librdkafka:tpcb_new -e probe_librdkafka:tpcb_newret__return)

echo "broker $brokers (pid $broker_pid); $count hits on $partitions partitions; trackpipe $trackpipe; $rounds rounds" >&2
order=(kcat one two)
for r in $(seq "$rounds"); do
    for c in "${order[@]}"; do
        read -ra cmd <<< "$(command_for "$c" "${groups[$((2 * r - 2))]}")"
        before=$(broker_ns)
        perf stat -x, -e task-clock,page-faults,context-switches -o "$work/$c-$r.stat" -- "${cmd[@]}" > /dev/null 2> "$work/$c-$r.stat.err"
        echo "$c $r $(( $(broker_ns) - before ))" >> "$work/broker"
        read -ra cmd <<< "$(command_for "$c" "${groups[$((2 * r - 1))]}")"
        perf record -q -F 2999 --call-graph dwarf "${events[@]}" -o "$work/$c-$r.data" -- "${cmd[@]}" > /dev/null 2> "$work/$c-$r.rec.err"
        # --no-inline: an inlined frame would hide its library (a libc memcpy shows as "inlined").
        perf script -i "$work/$c-$r.data" --no-inline --show-task-events -F comm,tid,time,period,event,trace,ip,sym,dso \
            2> /dev/null | gzip -1 > "$work/$c-$r.script.gz"
        echo "round $r: $c done" >&2
    done
    order=("${order[@]:1}" "${order[0]}") # each contender in each place in turn: drift spreads out
done

python3 - "$work" "$count" "$rounds" "$(basename "$trackpipe")" <<'EOF'
import gzip, re, statistics, sys
from collections import defaultdict
work, hits, rounds, binary = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

ROWS = [
    ("consumer", "librdkafka: consumer"),
    ("producer", "librdkafka: producer"),
    ("rdk?", "librdkafka: caller not found"),
    ("kernel", "kernel"),
    ("k.syscall", "  system calls"),
    ("k.fault", "  page faults"),
    ("k.other", "  other (interrupts, scheduling)"),
    ("libc", "libc and malloc"),
    ("vdso", "vDSO clock reads"),
    ("swift", "Swift runtime (libswiftCore)"),
    ("swiftlibs", "Dispatch, Foundation, other Swift libraries"),
    ("scan", "scan (TrackingDomain)"),
    ("count", "count (Windowing)"),
    ("rest", "rest of trackpipe (kcat: its own code)"),
    ("r.Pipeline", "  Pipeline"),
    ("r.Runner", "  Runner"),
    ("r.RecordFormats", "  RecordFormats"),
    ("r.Kafka", "  Kafka"),
    ("r.other", "  other (CLI, stdlib, unattributed)"),
    ("ld", "dynamic loader (start-up)"),
    ("other", "other libraries"),
]
MODULE = re.compile(r"^\$s(\d+)([A-Za-z_]\w*)")
OURS = {"TrackingDomain", "Windowing", "Pipeline", "Runner", "RecordFormats", "Kafka", "TrackpipeCLI",
        "HitGenerator", "trackpipe"}
CONSUMER = re.compile(r"^\$s5Kafka(0A8ConsumerC|13ConsumerBatch|\d+Fetch)|^rd_kafka_(consumer_poll|commit|assign|"
                      r"incremental|committed|offsets|query_watermark|seek|pause|resume|position|message_destroy|"
                      r"consumer_close|subscribe)")
PRODUCER = re.compile(r"^\$s5Kafka(0A8ProducerC|\d+TopicAdmin|\d+RecordDeleter)|^rd_kafka_(produce|poll$|flush|outq_len|topic_new)")
HEADER = re.compile(r"^(.*?)\s+(\d+)\s+[\d.]+:\s+(?:(\d+)\s+)?(\S+):\s*(.*)$")
FORK = re.compile(r"PERF_RECORD_FORK\((\d+):(\d+)\):\((\d+):(\d+)\)")

def module(sym):
    m = MODULE.match(sym)
    return m.group(2)[: int(m.group(1))] if m else None

def classify(tid, frames, client):
    dso = frames[0][1] if frames else ""
    if dso == "[kernel.kallsyms]":
        syms = [s for s, _ in frames]
        by = "t." + client.get(tid, "own")
        if any("exc_page_fault" in s for s in syms): return ["kernel", "k.fault", by]
        if any(s.startswith("entry_SYSCALL") or s == "do_syscall_64" for s in syms): return ["kernel", "k.syscall", by]
        return ["kernel", "k.other", by]
    base = dso.rsplit("/", 1)[-1]
    if base.startswith("librdkafka"):
        if tid in client: return [client[tid]]
        for s, _ in frames[1:]:
            if CONSUMER.search(s): return ["consumer"]
            if PRODUCER.search(s): return ["producer"]
        return ["rdk?"]
    if base == "[vdso]": return ["vdso"]
    if base.startswith(("libc.so", "libm.so", "libstdc++", "libgcc_s")): return ["libc"]
    if base.startswith("libswiftCore"): return ["swift"]
    if base.startswith(("libswift", "libdispatch", "libFoundation", "libBlocksRuntime", "lib_Foundation")): return ["swiftlibs"]
    if base.startswith("ld-linux"): return ["ld"]
    if base == binary:
        # The first frame of a module of ours names the work (a leaf in a stdlib specialization
        # belongs to its caller).
        for s, d in frames:
            if d.rsplit("/", 1)[-1] != binary: break
            m = module(s)
            if m in OURS:
                if m == "TrackingDomain": return ["scan"]
                if m == "Windowing": return ["count"]
                return ["rest", "r." + m if "r." + m in dict(ROWS) else "r.other"]
        return ["rest", "r.other"]
    if base == "kcat": return ["rest"]
    return ["other"]

def profile(path):
    rows = defaultdict(float)
    client, opening = {}, {}
    head, frames = None, []
    def flush():
        if head and head[3] == "cpu-clock":
            tid, period = int(head[1]), int(head[2] or 0)
            for row in classify(tid, frames, client): rows[row] += period
            rows["total"] += period
    for line in gzip.open(path, "rt", errors="replace"):
        if line.startswith(("\t", " ")) and head is not None and line.strip():
            parts = line.strip().split(None, 1)
            rest = parts[1] if len(parts) > 1 else ""
            m = re.match(r"(.*) \((.*)\)$", rest)
            frames.append((m.group(1), m.group(2)) if m else (rest, ""))
            continue
        if not line.strip(): continue
        flush(); head, frames = None, []
        f = FORK.search(line)
        if f:
            child, parent = int(f.group(2)), int(f.group(4))
            if parent in opening: client[child] = opening[parent]
            elif parent in client: client[child] = client[parent]
            continue
        h = HEADER.match(line.rstrip("\n"))
        if not h: continue
        head = h.groups()
        tid = int(head[1])
        if head[3] == "probe_librdkafka:tpcb_new":
            opening[tid] = "consumer" if "type=1" in head[4] else "producer"
        elif head[3] == "probe_librdkafka:tpcb_newret__return":
            opening.pop(tid, None)
    flush()
    # kcat's calls into librdkafka are not named in its chains; its clients are all consumers.
    if set(client.values()) == {"consumer"}: rows["consumer"] += rows.pop("rdk?", 0)
    return {k: v / 1000 / hits for k, v in rows.items()}  # ns -> µs per hit

def stat(path):
    out = {}
    for line in open(path):
        f = line.strip().split(",")
        if len(f) > 3 and f[0] and f[0][0].isdigit(): out[f[2]] = float(f[0])
    return {"task-clock": out.get("task-clock", 0) * 1000 / hits, "page-faults": out.get("page-faults", 0) / hits,
            "context-switches": out.get("context-switches", 0) / hits}

contenders = ["kcat", "one", "two"]
runs = {c: [profile(f"{work}/{c}-{r}.script.gz") for r in range(1, rounds + 1)] for c in contenders}
stats = {c: [stat(f"{work}/{c}-{r}.stat") for r in range(1, rounds + 1)] for c in contenders}
broker = defaultdict(list)
for line in open(f"{work}/broker"):
    c, _, ns = line.split()
    broker[c].append(int(ns) / 1000 / hits)

def cell(values, digits=3, sign=""):
    med = statistics.median(values)
    return f"{med:{sign}.{digits}f}" + (f" ({min(values):{sign}.{digits}f}…{max(values):{sign}.{digits}f})" if len(values) > 1 else "")

# Differences are taken within a round (the runs next to each other), then their median.
def row(label, per, digits=3):
    diffs = [[a - b for a, b in zip(per[x], per[y])] for x, y in (("one", "kcat"), ("two", "one"))]
    print(f"| {label} | " + " | ".join([cell(per[c], digits) for c in contenders] + [cell(d, digits, "+") for d in diffs]) + " |")

header = "| | kcat | one stage | two stages | one stage − kcat | two stages − one stage |\n|---|---|---|---|---|---|"
print(f"µs per input hit ({hits} hits): medians of {rounds} rounds (min…max); each row's own median")
print(header)
for key, label in ROWS + [("total", "**total (perf record)**")]:
    per = {c: [run.get(key, 0.0) for run in runs[c]] for c in contenders}
    if key in ("rdk?", "ld", "other", "swiftlibs") and max(max(v) for v in per.values()) < 0.005: continue
    row(label, per)
row("**total (perf stat task-clock)**", {c: [s["task-clock"] for s in stats[c]] for c in contenders})
row("page faults per hit", {c: [s["page-faults"] for s in stats[c]] for c in contenders}, 4)
row("context switches per hit", {c: [s["context-switches"] for s in stats[c]] for c in contenders}, 4)
row("**broker CPU per hit** (its threads' run time, perf stat runs)", broker)
print("\nThe kernel row by thread:\n" + header)
for key, label in [("t.consumer", "librdkafka's threads of consumers"), ("t.producer", "librdkafka's threads of producers"),
                   ("t.own", "the process's own threads (trackpipe's, Dispatch's; kcat's main)")]:
    row(label, {c: [run.get(key, 0.0) for run in runs[c]] for c in contenders})
EOF
