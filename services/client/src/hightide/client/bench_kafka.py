"""The benchmark over the Kafka listener: confluent-kafka against Hightide, beside Hightide's own client, in one run.

Room: services/client (the `hightide bench --workload kafka` command). One fresh local cluster as `hightide cluster
up` starts it (nats-server, one controller, three brokers, each broker with its Kafka listener on 127.0.0.1), in a
directory under the bench's work directory, removed afterwards. On that one cluster, with acks=all, RF=3 and
min.insync.replicas=2 (`bench_cluster.create_topic`), each topic with `bench_cluster.PARTITIONS` partitions:

| figure                          | how                                                                            |
| ------------------------------- | ------------------------------------------------------------------------------ |
| own client, 100 B and 16 KiB    | `bench_cluster.produce_throughput`: the figures `--workload produce` measures   |
| confluent-kafka, 100 B / 16 KiB | `KAFKA_PRODUCE_COUNT` (`KAFKA_LARGE_PRODUCE_COUNT`) records produced as fast as |
|                                 | librdkafka takes them with its default producer (acks=all, linger.ms 5, no     |
|                                 | idempotence: `producer_config` says why), then flush; every delivery report    |
|                                 | must be a success; the clock starts after one warm-up record, once the         |
|                                 | producer is connected and has the topic's metadata, as the own client's does   |
| idempotent, 100 B / 16 KiB      | the same with enable.idempotence on, beside them, judged by no goal            |
| confluent-kafka p50/p99         | 100 B records stamped with the monotonic clock, produced at                    |
|                                 | `bench_cluster.LATENCY_RATE_PER_S` on a schedule by librdkafka's default       |
|                                 | producer; a confluent consumer in the same process, on librdkafka's defaults   |
|                                 | (fetch.wait.max.ms 500: the broker answers a parked Fetch when the HW passes   |
|                                 | it), assigned every partition (read_committed is not needed: it reads only     |
|                                 | below the high watermark), takes arrival minus stamp; a warm-up record per     |
|                                 | partition is read first, unmeasured                                            |
| idempotent p50/p99              | the same with idempotence on, on a topic of its own, judged by no goal         |
| 16 KiB, client apart            | the own client's and the idempotent producer's 16 KiB runs again, last, with   |
|                                 | this process (the client) on one CPU and the cluster's processes on the others |
|                                 | (`client_apart`): beside each other, judged by no goal; left out on a machine  |
|                                 | with one CPU                                                                   |

The latency runs come last, after the confluent consumer's group coordinator has been found (which creates the
offsets topic, 50 partitions) and that topic has a full ISR: both clients are measured on the same cluster, and the
topic's creation is not inside any of their windows.

A real Apache Kafka cluster cannot run here (its jars come from Maven), so the reference figure is the one the issue
gives for this kind of machine (`KAFKA_REFERENCE_RECORDS_PER_S`: confluent-kafka against Kafka 4.0, one controller
and three brokers, RF=3, min ISR 2, acks=all, 100 B), printed as a reference and never as a measurement.
Goals (issue 15): the listener's acks=all throughput with confluent-kafka at least the own client's; p99
produce-to-consume at most 10 ms at 10,000 records/s; both on librdkafka's default producer, beside the own client
on its defaults (idempotent), each client as a Python user gets it. Numbers are printed, never asserted.

First pass (the Kafka listener's receive buffers and pipeline fast path): at load 31 every figure of both clients
swung 1.5-2x from run to run; only one-change A/B runs said more. The kernel receive buffer alone, A/B on one
cluster each at load 22: confluent-kafka 16 KiB 30.7-35.3 MB/s without it, 38.3-45.5 MB/s with it; 100 B 87k and
141k records/s.

Where the time goes (second pass, traced at load 17-35: broker-side timestamps from Produce received to answered,
each driver input timed, librdkafka's statistics (statistics.interval.ms) and delivery reports):

- librdkafka's idempotent producer keeps one Produce per partition in flight. It allows 5 minus the partition's
  *messages* in flight (`rd_kafka_toppar_producer_serve`: RD_KAFKA_IDEMP_MAX_INFLIGHT - rktp_msgs_inflight, counted
  in `rd_kafka_msgbatch_ready_produce`), so once a batch of 5 records or more is out, that partition sends nothing
  until it is answered (its statistics: waitresp_cnt 2 per broker, one per partition led, in the 16 KiB run). So a
  record waits for the batch ahead of it (up to one acks=all round trip: int_latency 20-50 ms at load 17-35),
  then its own round trip (rtt 45-60 ms); the delivery report and the consumer see it at the same time (the
  parked Fetch is answered in the input that moves the HW), so produce-to-consume is about 1.5 acks=all round
  trips. Against Kafka the client does the same, but there a round trip takes 1-2 ms. The 16 KiB figure is bound
  the same way: six ~1 MB requests in flight, 6 MB per round trip (broker-side 85 ms p50 at load 32, of which
  parsing 0.2 ms and the append 3.6 ms; the rest is replication), where the own client had ~19 requests in flight.
  Without idempotence (librdkafka's own default) it sends a Produce per record (42,951 in 5 s at linger.ms 0) and
  the brokers fall 30 s behind; idempotence stays, as the own client and Kafka's Java client default to it.
- confluent-kafka requires a group.id, and librdkafka looks its coordinator up at once: on the fresh cluster that
  created `__consumer_offsets` inside the measured window (150 replicas, each a log fsynced on creation; the
  broker inputs that applied that metadata took 0.5-0.8 s each at load 30, stalling every hop). That was most of
  the p99 (342-1360 ms on a quiet machine). Now `find_group_coordinator` and `offsets_topic_ready` come first, as
  Kafka's EndToEndLatency calls `consumer.position` (a coordinator round trip) before its first send.
- The offsets topic keeps costing afterwards, for both clients: a follower's fetch names every partition it
  follows from that leader, idle ones included (no fetch sessions, KIP-227), and every partition answered is a
  FetchServed event. Back to back on one cluster at load 29-33, before and after the topic: the leader's
  replica-fetch input p50 0.19-0.24 ms, then 0.70-0.77 ms; the own client's broker-side acks=all p50 6.4-6.8 ms,
  then 14-16 ms; its produce-to-consume p50 19-20 ms, then 32-33 ms. The old order measured the own client before
  the topic existed and confluent-kafka after; the own client's figure is now taken on the same cluster.
- linger.ms 0 (the first pass's choice, after EndToEndLatency, which sends one record and waits for it) at a fixed
  rate makes each partition's next request carry only what came in during the last round trip: back to back at
  load 28-34, p50 141 and 130 ms with linger.ms 0, 71 and 92 ms with 5, and 315 and 400 Produce requests in 5 s
  against 247 and 196. The latency producer now keeps librdkafka's default (5).
- The first second of a run (producer id, metadata, the consumer's first fetches) held p99 at 750-800 ms where the
  rest of the run had 135-246 ms; the warm-up records take it out.

`hightide bench --workload kafka` back to back, base (8c54b7d's benchmark) and this one, load 31-36 (1-minute):

| figure                                | base (two runs)  | this (two runs) |
| ------------------------------------- | ---------------- | --------------- |
| confluent-kafka p50 at 10,000/s, ms   | 184 / 125        | 81 / 75         |
| confluent-kafka p99 at 10,000/s, ms   | 2,053 / 1,056    | 296 / 190       |
| own client p99 at 10,000/s, ms        | 688 / 70         | 268 / 435       |
| confluent-kafka 16 KiB, MB/s          | 31.6 / 29.9      | 31.0 / 31.9     |

(the own client's latency is now taken with the offsets topic in place; its runs swing most at this load.)

What is left is the acks=all round trip itself: two NATS hops (leader to follower with the data, follower to leader
with its new offset), three driver inputs across two brokers, and the answer to the follower that tells it the new
HW; both clients pay it, and librdkafka pays it about 1.5 times per record (the third and fourth passes below
shorten its inputs). One more candidate, tried and not kept: the leader answers a follower's fetch at once when only
the HW moved (`ReplicaManager._read_fetch`'s "told" check; Kafka's DelayedFetch completes a follower's fetch on new
data, not on a HW change). With librdkafka's lockstep (the next Produce of a partition arrives just after the HW
moved) both followers are then on their way back with that empty answer when the new batch is appended. Switched
off, back to back at load 32-34 (two runs each): confluent-kafka p50 59 and 62 ms against 90 and 80 ms, p99 not
better (759 and 355 ms against 400 and 319); 16 KiB 28.7 and 36.0 MB/s against 25.6 and 27.7 (load 29-30).
librdkafka's socket.nagle.disable made no difference (16 KiB 25.4 and 28.0 MB/s with it, 29.9 and 26.5 without; 100
B latency alike). It changes every simulator seed's trajectory (the seeds' pinned round trips), so it is left out
(the fourth pass kept to changes that leave the seeds where they are).

Third pass: the follower fetch path (incremental fetch sessions, KIP-227: `hightide.core.fetch_session`). Where a
follower fetch's time went, measured in process (the real ReplicaManager on memory disks, the real outbox event sink
on a temporary file, msgpack encode and decode of each message; CPU time, which depends little on the load), one
follower fetch naming 60 partitions of which 2 take a 5-record batch per round, ms per fetch:

| part                                   | main (f04e15d), load 11 | sessions off, load 15 | sessions on, load 11 / 15 |
| -------------------------------------- | ----------------------- | --------------------- | ------------------------- |
| request encode (follower)              | 0.13                    | 0.14                  | 0.02 / 0.03               |
| request decode (leader)                | 0.37                    | 0.41                  | 0.03 / 0.04               |
| leader input (read, follower state,    | 0.91                    | 1.01                  | 0.85 / 0.99               |
|   events emitted, answer, poll)        |                         |                       |                           |
| follower input (apply, next fetch)     | 0.40                    | 0.50                  | 0.14 / 0.16               |
| outbox write of the events             | 0.25                    | 0.24                  | 0.05 / 0.06               |
| total                                  | 2.06                    | 2.31                  | 1.09 / 1.28               |
| FetchServed events per fetch           | 60                      | 60                    | 1.3                       |

("sessions off" is this build with `max.incremental.fetch.session.cache.slots=0`. With the final rules, which also
answer every partition a fetch names, at load 22: sessions off 0.17 / 0.46 / 1.12 / 0.55 / 0.31 = 2.61 ms, on
0.04 / 0.06 / 1.10 / 0.19 / 0.09 = 1.49 ms, FetchServed 60 and 1.7 per fetch.) Every part that scaled with the
partitions named went: the request names only what changed, the answer only what moved, and a partition the
follower has caught up on is announced once, not 2 x 60 times per round trip to the outbox, the event relay and the
events stream. What was left then, the leader's read of every partition of the session on each fetch (about 14
us a partition), the fourth pass removes for the partitions that did not change. The per-partition request and answer
models are built with `model_construct` (the core's own values): validating them was the largest single cost of a
read before. A FetchServed that repeats the last one exactly is no longer elided separately: in a session a
caught-up partition is not answered, so it is not announced; a consumer's repeated empty answers stay events.

`hightide bench --workload kafka`, sessions off and on alternating (19f770c, load 13-16): the confluent-kafka p50
improved in both pairs (63.6 / 56.1 ms -> 38.3 / 41.6), the rest swung as much as it moved. At this load neither
goal can be judged (every hop waits for a core); the quiet-machine figures are the lead's.

Fourth pass (issue 15's latency: the leader reads only what changed; `ReplicaManager._read_fetch`). Measured with
each broker's driver inputs timed in CPU time (thread time from taking an input to asking for the next), hop
timestamps on the monotonic clock shared with the client, and librdkafka's statistics, on the benchmark's cluster
with the offsets topic in place (each leader is in a session with each follower of ~19 partitions: 2 of the
measured topic, ~17 of `__consumer_offsets`). One record at a time (base f117689, load 7): the Produce is appended
0.3 ms after it is parsed; both followers' parked fetches are answered 1.5-2.5 ms in, in the same input (each
re-read every partition of its session); the followers append 0.8-2.8 ms later and fetch again in that input; the
input that takes the second follower's fetch moves the HW and answers the Produce and the consumer's parked Fetch
together (5.6-11.8 ms); then 4-8 ms passed before the listener wrote them, with no input on that broker in
between: waiting for a core. So the leader answers a parked Fetch in the very input that moves the HW, and a
follower fetches again at once after its append: no timer is waited on. What the CPU went to was reading
partitions that had not changed: every woken parked fetch and every follower fetch read all ~19 partitions of its
session (its core's checks, the answer's model, the FetchServed event, a log read at the LEO). Now a partition has
a version, moved whenever its core changes and for all when the metadata moves; a woken parked fetch reads again
only what was touched since its last read, a session fetch answers an unchanged partition it does not name from its
last read (only the follower's fetch and caught-up times move), and a read at the end of the log does not go to the
log. The answers are the ones a full read builds (the simulator's pinned seeds did not move).

CPU per input, base and this build back to back, load 9.7-11.2 (the trace harness, not `hightide bench`):

| input (us of CPU)                                        | base, one at a time | this | base, 10,000/s | this    |
| -------------------------------------------------------- | ------------------- | ---- | -------------- | ------- |
| leader: a Produce (append, followers' fetches answered)  | 985                 | 693  | 705-743        | 499-577 |
| leader: a follower's fetch (its offset, the HW)          | 490                 | 296  | 484-492        | 298-307 |
| follower: the leader's answer applied, next fetch sent   | 253                 | 253  | 174-179        | 191-199 |
| the three brokers' CPU over the run (user+sys), s        | 2.52                | 2.31 | 2.84           | 2.49    |

One record at a time (300 records 20 ms apart to one partition, linger.ms 0, confluent-kafka on both ends), base
and this build alternating, load 12-13: produce-to-consume min 5.1 and 5.1 ms against 3.8 and 4.0, p10 7.1 and 8.1
against 5.5 and 5.9, p50 14.9 and 14.2 against 8.5 and 10.4 (p99 swings with the load: 122-150 against 86-185). When
no hop waits for a core, a record now goes: parsed 0.2 ms, appended 0.45, both followers' fetches answered 0.75 (was
1.5-2.5: the re-reads), appended by the followers 1.2-2.4, HW moved and the Produce and the consumer's Fetch
answered 2.3-3.7, written 2.7-4.3.

And the driving task now gives the loop a turn after an input that answered or sent something when more inputs
wait (asyncio's queue does not give way while it holds items): from the leader's Produce answer to the listener's
write, p90 1.1 and 1.6 ms without it, 0.6 and 0.6 ms with it (10,000/s, load 14, two runs each); p50 0.4-0.5 ms both.

Throughput is not bound by the brokers' CPU: 150,000 records of 100 B went through in 1.1 s with each broker using
0.13-0.17 s of CPU (confluent-kafka's bound is its Python `produce` loop and the one Produce per partition in
flight); at 16 KiB a ~1 MB Produce costs its leader ~2 ms of CPU and each follower's append ~0.43 ms, the brokers
used 0.2-0.4 s of CPU each over a 2.6 s run: the bound is the acks=all round trip of one ~1 MB request per
partition, and at load 8-14 most of that round trip is waiting for a core. librdkafka opens no fetch session (its
Fetch carries session id 0 and epoch -1, FINAL: `rd_kafka_broker_fetch_toppars`), so sessions for the listener's
consumers would change nothing for this client; they were not added. Left in the per-read cost: the log's scan
from its sparse index (about a dozen 100-B batch headers parsed per read: `Segment.translate_offset`, libs/storage)
and kio's encoding of each answer (60-90 us).

`hightide bench --workload kafka`, base (f117689) and the fourth pass alternating, load 6.9-11.6: every figure
swung 1.5-2x from run to run (confluent-kafka p99 413 / 173 ms against 231 / 275); neither goal was met there.

Fifth pass (issue 15's leads: copies and page faults at 16 KiB, per-hop Python at 100 B). Measured with a harness
(not committed) that starts the benchmark's cluster, runs confluent-kafka's 16 KiB throughput (10,000 records) and
its 10,000/s latency run, and reads each process's /proc CPU and minor page faults, plus `time.thread_time` around
the broker's functions. At 16 KiB a broker's CPU went to no single place: its Kafka-listener frame read and parse,
validation, the append (`writev` 0.35 ms/MB), log reads, NATS sends and receives, each 0.1-0.9 ms/MB at load 7-14, and
40-90 thousand page faults per broker per run (160 MB produced): glibc served every ~1 MB copy (frame, records, log
read, msgpack body) from a fresh mmap, zeroed and faulted in, then unmapped it (`hightide.runtime.memory`: the broker
now keeps freed buffers, about 3 thousand faults). With the brokers, nats-server and the client all on 2 cores, the
cluster spent 15-20 ms of CPU per MB produced: at 70 MB/s that is most of the machine, so on a quiet machine the
16 KiB figure is bound by CPU as much as by librdkafka's one request per partition in flight. The 100-B latency run
at load 12: per broker 79 Produce requests in 5 s (about 210 records each: one per partition in flight, so the
records of a round trip go together), each 0.5-0.6 ms of CPU at the leader, most of it the record-by-record check
(`validate_produce`, about 2.3 us per record); a broker used about 1 s of CPU in the 5 s, so the round trip's 50-70
ms at that load is waiting for a core. Also changed: a segment reads its latest appended batches from what it
appended (a tail read of 200-B batches 28.1 -> 2.6 us of CPU, no header scan), kio's schema look-ups and each
entity's field plan are cached (a 100-B Produce parsed, translated, answered and encoded 100-131 -> 64-86 us, a
6-partition Fetch 251-385 -> 202-238 us), parked fetches are indexed by partition. Base (f71ef2d) and this build
alternating, the harness, load 12-16, the three brokers' CPU: 16 KiB 2.67 / 2.76 / 2.56 s -> 2.23 / 2.02 / 1.96 s
(faults per broker 42-90 thousand -> 2.7-3.7 thousand), the latency run 2.65 / 2.27 / 2.30 s -> 2.06 / 2.38 / 2.37 s
(no difference at that load). `hightide bench --workload kafka`, three base / this pairs at load 10-17 swung 2x
either way (confluent-kafka 16 KiB 22.5 / 19.2 / 41.0 against 20.5 / 42.8 / 34.2 MB/s, p99 128 / 630 / 650 against
357 / 177 / 274 ms); neither goal is met at this load, and the quiet-machine figures are the lead's to take.

Sixth pass (stalls of a broker's event loop, which acks=all multiplies: every partition's HW waits for all three
brokers, so one broker stopped holds every record in flight). Measured with the harness, each broker's inputs
timed on the wall clock and its garbage collections logged (gc.callbacks from a sitecustomize, not committed), in
the 10,000/s run: a fresh broker's first full collection fell inside the run on all three brokers, 94-126 ms each
(load 17; ~70,000 objects of modules and logs walked), and 1.2-1.6 ms once the broker freezes what it holds after
recovering its logs and at registration (`gc.freeze`); the tick that wrote the HW, recovery-point and log-start
checkpoints (three files, two fsyncs each, every 5 s) took 5-212 ms (median ~32, load 12-14), and 0.5-2.9 ms now
that the files are written on a thread (the offsets taken on the driving task, as Kafka's scheduler does); the
event relay's cursor, saved five times a second by a rename over the old file, cost 0.6 ms p50, 4-6 ms p90 and up
to 46 ms on this disk (ext4 starts the write-back at such a rename), and 0.12-0.16 ms overwritten in place. On a
quiet machine, where a round trip takes a few ms, each of these stalls on any broker lands in the p99. At load
15-23 every hop is preempted instead (150-250 nonvoluntary context switches a second per broker), and the
benchmark, base (5b6da64) and this pass alternating, swung as before: confluent-kafka p50 60.8 / 85.1 / 53.6
against 68.8 / 65.4 / 72.1 ms, p99 175 / 356 / 249 against 298 / 636 / 179 ms, 16 KiB 38.4 / 25.7 / 27.0 against
31.5 / 43.4 / 25.6 MB/s (the own client's p99 0.4-1.7 s in both). Left: the
record check (`validate_produce`, 1.4 us of CPU a record at this load, 0.3 ms per 210-record Produce).

Seventh pass (issue 15's p99, hop by hop; a harness, not committed, timed every driver input on each broker (wall,
thread CPU, time queued, effects), every loop callback over 0.7 ms, each follower fetch sent and answered, the
listener's frames read and answers written, and each record's stamp and arrival; load 6.7-17 throughout, so every
figure below is a ratio or CPU). A record's inputs cost little CPU: the leader's Produce 1.0-1.1 ms (~200 records),
a follower's fetch at the leader 0.55-0.65, a follower applying an answer 0.4, an HW-only answer 0.2; the Produce's
broker-side p50 was 15-30 ms, of which 3-4 ms CPU on the critical path: the rest is waiting for a core (700-1,900
involuntary context switches per broker in 6 s; a traced NATS hop 2.7-5 ms; the NATS flusher's send 2.2 ms p50 for
0.06 ms of CPU, the kernel running the receiver). Three findings. (1) 45-50% of Produce requests moved the HW only
after 3-4 follower fetches instead of 2 (append to HW p50 18-20 ms against 11, load 6.7): a follower told only the
new HW comes back after the next Produce is appended, so its data waits for that refetch. Switched off for an
experiment (no HW-only answer to a follower, Kafka's DelayedFetch; a core rule, so it moves every seed; kept
later as KAFKA-9952, docs/ARCHITECTURE): such requests 8-11%, the brokers' CPU 14-18% lower (1.07 / 1.12 / 1.16
-> 0.99 / 0.91 / 0.84 s), p50 62.6 / 83.4 -> 56.5 / 64.3 ms, p99 alike (163 / 295 -> 166 / 278), load 14-17.
(2) The client: from a Produce answer written to that partition's next Produce read took p50 19-72 ms, the
brokers' part or more, and records' stamps
stalled over 10 ms about 100 times in 5 s; the schedule's `poll` got a timeout under librdkafka's millisecond, so
the producing thread spun (`PACING_WAIT_MIN_S` now: that thread's CPU in the 5 s 0.46 / 0.57 -> 0.17 / 0.17 s at
load 15-17; alone at 10,000/s, 1.35-1.52 -> 0.21-0.24 s of process CPU in 3 s; in the traced cluster, spin / this at
load 13-16, that wait p50 96 / 87 -> 63 / 33 ms, Produce requests in the run 121 / 144 -> 179 / 234, their
broker-side p50 27 / 32 -> 45 / 44 ms, end to end p50 92 / 123 -> 109 / 97 ms: the brokers get the requests sooner
and serve more of them, and at this load that gains nothing end to end). With the spin, one Produce in four was read
while another was unanswered on its connection; TCP_QUICKACK after each frame read (a Nagle / delayed-ACK theory)
changed that 26% -> 25% and nothing else, not kept. (3) At 16 KiB the appends' `writev` took 2.8 ms of CPU per MB
on each broker (~0.44 s of its ~0.75 s of input CPU; 0.4-3.1 ms/MB for a bare 1 MiB writev on this VM), so three
replicas' page-cache copies are about half the cluster's CPU per MB. No epoch checkpoint, roll or GC pause fell
inside a measured window (the epoch checkpoints, 80-300 ms inputs, come with the warm-up). `hightide bench
--workload kafka`, main and this alternating, load 11-17: confluent-kafka p50 70.8 / 55.6 / 141.5 against 59.7 /
86.9 / 84.1 ms, p99 285 / 302 / 533 against 183 / 287 / 323 ms (no conclusion at this load).

Eighth pass (the client's own CPU; a harness, not committed, ran the latency run's schedule against a bench cluster
with each process's /proc CPU and each client thread's, perf on the client, and the producer's settings varied).
librdkafka's idempotent producer busy-polls while a partition's Produce is unanswered (docs/ARCHITECTURE): its three
`rdk:broker` threads took 1.7-3.3 s of CPU per 5-s run (~1,500 involuntary context switches each), against 0.53 s
for the whole client with the default producer. Quiet (load under 1 before each run), the latency run with the
idempotent producer, `hightide bench --workload kafka`, three runs: p50 9.7-28 ms, p99 130-309 ms (the own
client's p99 19-51 ms); with librdkafka's default producer (acks=all, linger.ms 5), back to back on one cluster,
three runs: p50 8.5-9.0 ms, p90 13-15 ms, p99 21.6-28.5 ms, the brokers ~1.8 s of CPU each per 6 s, nats-server
0.75, the archiver 0.85 (the events are ~25% of the cluster's CPU at 10,000/s: with them off the brokers took
1.35-1.74 s). So the run now uses the default producer and measures the idempotent one beside it without a goal.
The p99 goal (10 ms) is still far: linger.ms alone is 5 ms, and the broker path's best case 3-4 ms, on two cores
that the client, three brokers, nats-server and the archiver share. The throughput runs stay idempotent (one
cluster, A/B: idempotent 115-158k records/s at 100 B and 42.5-44.5 MB/s at 16 KiB; not idempotent 121-249k and
70-88 MB/s). After KAFKA-9952 (no HW-only answer to a follower), on a machine ~30% slower than that quiet one (the
same cluster's CPU 2.3 s per broker per 6 s against 1.8), the harness alternating before / after, two runs each:
p50 31.9 / 39.0 against 31.6 / 49.0 ms, p99 110.8 / 97.5 against 88.3 / 140.7 ms, the brokers' CPU alike (2.3-2.5
s each): no difference that this machine could show; `hightide bench --workload kafka` on it: confluent-kafka
104.9k records/s at 100 B (own client 102.8k), 42.9 MB/s at 16 KiB (own 62.5), p50 40.2 ms, p99 101.3 ms (own
client's p99 81.0), the idempotent latency run p50 70.5 ms, p99 219.4 ms. A shorter linger.ms for the default
producer (the harness, the same slow machine, linger 5 / 1 / 0 in turn, twice): p50 36.9, 43.8 / 288, 91 / 14,350,
16,453 ms, p99 106, 115 / 747, 338 / 29,917, 29,262 ms; at linger.ms 0 each record is a Produce of its own, the
brokers took 16-17 s of CPU each and the run 36 s instead of 6: fewer records per request cost the cluster more
than the wait saves, so 5 ms (librdkafka's default) stays.

Ninth pass (2026-11-30; measured only, nothing changed). A faster machine than the one above (each broker's CPU in a 5-s
latency run 0.7-1.25 s against 2.3 s), quiet (load 0-2), `hightide bench --workload kafka` three times: confluent-kafka
100 B 283k / 261k / 271k records/s against the own client's 262k / 275k / 262k; 16 KiB 85.6 / 82.4 / 78.9 MB/s against
143.6 / 145.5 / 141.2; p50 6.6 / 7.0 / 7.1 ms, p99 11.3 / 12.0 / 15.0 ms (the own client's p99 11.7 / 13.8 / 13.4). A
harness (not committed) that runs only the latency run, three times per cluster, on a fresh cluster with the offsets
topic in place: in eleven such batches in twenty minutes, the same code, p99 8.4-16.0 ms (p50 5.3-7.2), 10 of the 33
runs under 10 ms, the first batch all three (9.9 / 8.4 / 9.6). The records over 10 ms come in bursts about a second
apart. The archiver (one parquet write a second, ~90 ms of CPU each) at nice 10: 9.5-14.8 ms; stopped (SIGSTOP) for the
runs: 9.7-13.4 ms, median 9.9, against a median of 10.6 for the batches beside them: no single stall makes the tail; it
is the cluster's CPU on two cores (per 5-s run each broker 0.7-1.25 s, nats-server and the archiver about 0.45 s each,
the client 0.45 s). So on this machine the goal is met in some runs and missed by up to 50% in others, and the
benchmark's own run (after 2 x 160 MB of throughput runs on the same cluster) is at the worse end.
At 16 KiB (a harness: 10,000-40,000 records, librdkafka's statistics, /proc CPU, each broker's Produce read and answer
times, py-spy on the brokers): librdkafka sends one partition's batch per Produce (~0.97 MB) and keeps one in flight per
partition (idempotence, as above). Its sticky partitioner (keyless records stay on a partition for
`sticky.partitioning.linger.ms`) filled the queue in runs of one partition: in one run one leader's two partitions got
about 40 and 80 Produce requests, another leader's one about 20. A partition's request took 10.5-20 ms at the broker
(p50; p90 25-36 ms), and 1.6-10 ms passed from its answer to that partition's next request. Over a 6.9-s run (95 MB/s)
the client took 4.3 s of CPU (librdkafka's broker threads poll without a timeout while a Produce is unanswered), the
brokers 1.5-1.8 s each, nats-server 1.8 s and the archiver 0.4 s: 11.4 of the 13.8 core-seconds there were, so the
client's wait takes as much CPU as the brokers it waits on. In the brokers, 32-40% of py-spy's samples are in the socket
send of nats-py's flusher (each leader publishes a partition's ~1 MB once per follower; on loopback the send also runs
the receiving side of TCP), the appends' writev 3-6%. What is left for this figure: fewer copies of a follower's answer
on its way to NATS, or fewer sends of it.

Tenth pass (2026-11-30; the benchmark, not the broker). librdkafka's debug log (`debug=protocol,eos`) of the
throughput producer showed its first Produce leave 0.52 s after the first `produce` call: the bootstrap's ApiVersions
and Metadata answered in 14 ms, then its idempotence state machine found no broker connection up ("No brokers
available for Idempotent producer", "Coordinator not up") and waited out a 500 ms timer before InitProducerId, though
a connection was up 40 ms later. The own client acquires its producer id in `Producer.__aenter__`, before its clock
starts, so confluent-kafka's window held half a second the own client's did not: at 16 KiB the first delivery report
came 0.61 s into a 1.84 s run. Both windows now open on a producer ready to send (`kafka_throughput` delivers one
warm-up record first). A harness running pairs (own client, then confluent-kafka, 10,000 records of 16 KiB each;
/work/prof/s33/both16.py, not committed): before, two pairs on one cluster, 150.3 / 166.5 against 95.9 / 79.8 MB/s
(and, a fresh cluster per pair, 136.5-151.6 against 107.1-112.4 at 20,000 records, where the half second weighs
less); after, a fresh cluster per pair, 141.3 / 141.0 / 144.6 against 134.9 / 127.1 / 134.5 MB/s.
`hightide bench --workload kafka`, three runs: confluent-kafka 100 B 348.8k / 372.6k / 360.5k records/s against the
own client's 264.0k / 269.0k / 285.6k (261-283k before, beside 262-275k); 16 KiB 118.2 / 138.2 / 130.1 MB/s against
137.5 / 147.1 / 163.1; p50 6.66 / 5.93 / 6.31 ms, p99 11.47 / 9.83 / 10.12 ms (the own client's p99 15.06 / 9.64 /
13.65). What is left at 16 KiB is the client's: its sticky partitioner gives
10 ms runs of records to one partition, so 10,000 records queued in 0.1 s land unevenly (in two runs 446-3,124 and
1,067-4,340 records per partition, a sixth partition sometimes none), and with one ~1 MB Produce in flight per
partition the fullest partition's round trips, one after another, end the run (the last 10% of the deliveries took
0.12-0.18 s). Longer runs were no steadier here, for a reason in the machine rather than in either client or the
brokers: a plain loop of 1 MiB `write`s to a new file ran at 5.9 GB/s (0.17 ms of CPU per MB) for about the first
1 GB, then at 0.39-0.46 GB/s (2.2-2.6 ms of CPU per MB), with the page cache's dirty pages near zero throughout (the
cause is not established); deleting the file made the next gigabyte fast again. A cluster that keeps what it was sent
meets the same: three rounds of 20,000 records per client (own, then confluent-kafka) on one cluster took the brokers
0.72-0.81, 0.69-1.08, then 1.22-1.67 s of CPU each per run, py-spy putting a broker's `DiskIO.writev` at 3% of its
samples in the first round and 28% in the third, and the figures fell: 152.9 / 121.9, 160.6 / 92.2, 110.6 / 66.6
MB/s. (Four rounds of 20,000 by confluent-kafka alone, 1 GB of appends a round, stayed at 135-150 MB/s with the
brokers' CPU flat, so the threshold is not simply the data written.) In `hightide bench` the confluent-kafka runs
come after the own client's, so where this threshold is near they bear more of it. At the benchmark's counts it did
not show: deleting each client's throughput topics before the next runs (the bench cluster at file.delete.delay.ms=0,
waiting until no broker's disk held their files) against the benchmark as it is, alternating, two pairs, later and
on a noisier machine (the latency figures 12-19 ms in all four): confluent-kafka 16 KiB 113.3 / 124.4 against 120.8 /
116.3 MB/s, so the benchmark does not do it.

Eleventh pass (2026-11-30; the latency run's bursts). A harness (/work/prof/s34/burst.py, not committed) ran the
10,000 records/s run three times per fresh cluster, each record's arrival time kept, and every 5 ms read each
process's run time and run-queue wait (`/proc/<pid>/task/*/schedstat`). The records over 10 ms came in bursts of
100-200 ms about once a second, most of them while the archiver wrote its Parquet (60-100 ms of CPU): then each
broker waited 10-31 ms for a core per 50 ms, against 2-8 ms otherwise, although the archiver ran at nice 10. The
reason is Linux's autogroups (on here, as on most distributions): `cluster up` starts each service in a session of
its own, each session is a task group, the groups share the CPU by their own niceness, and a process's niceness
only orders it within its group, so the archiver had a broker's full share (and SCHED_IDLE, tried in the ninth
pass, changed nothing for the same reason). The archiver now sets its autogroup's niceness as well
(`hightide.runtime.priority`). With the harness setting it from outside, twelve runs each, alternating clusters:
p99 median 16.1 ms (12.4-33.4) at the autogroup's nice 0, 13.0 ms (11.0-20.7) at 10, about 14 ms at 19 (six
runs); the brokers' waits during its writes mostly 3-10 ms. Its CPU also fell: decoding the EVENTS messages
checked every field of every event through `typing` look-ups, a sixth of its CPU; a quick exact-type test per
field, built once per class (`events.check_event`), and converting only fields that hold tuples took
`decode_envelopes` from 17.1 to 7.9 us per event, the archiver from 0.41-0.50 to 0.34-0.39 s per 5-s run.
`hightide bench --workload kafka`, the base (f89fe6e) and this alternating, three pairs: confluent-kafka p99 14.63 /
24.70 / 14.54 against 12.30 / 13.01 / 10.45 ms (p50 7.29 / 7.78 / 6.92 against 7.39 / 7.83 / 6.56), the idempotent
run's p99 80.1 / 14.9 / 78.0 against 14.4 / 39.8 / 12.0; 16 KiB 114.0 / 118.5 / 119.6 MB/s beside the own client's
133.8 / 125.2 / 139.2, against 113.5 / 114.9 / 126.1 beside 130.8 / 131.5 / 153.2 (no change); 100 B 303k / 315k /
348k beside 261k / 254k / 259k, against 328k / 307k / 339k beside 268k / 265k / 275k records/s. The p99 is still
over 10 ms on this machine, which ran slower than in the tenth pass (p50 7-8 ms against 6-7). What is left is
spread: with the archiver behind, the records over 10 ms are about 5-10% of each 100 ms, the cluster using
115-125 ms of CPU per 100 ms of its 200 (the brokers 20-35 ms each, the client 25-30, nats-server 10). Tried and
not kept: nats-server with GOMAXPROCS=1 (three pairs of three runs: p99 12.6-18.7 against 12.4-15.3 ms). In this
run py-spy put 15-20% of the brokers' samples in the NATS flusher's socket send, but perf on a broker over a run
found 79% of its samples in libpython, 11% in the kernel (sends included) and 4% in pydantic-core: at 100 B the
brokers' cost is the interpreter's, spread over the hops' Python code. cProfile in each broker over one run
(started at import from a sitecustomize, dumped before and after the run and subtracted; /work/prof/s34/cdiff.py;
its overhead doubles the brokers' CPU, so only shares count): of the three brokers' 15.2 s, 41% waiting in epoll;
the NATS flusher's socket sends 8% (5,168 sends, 234 us of wall time each: on loopback a send runs the receiving
side and wakes nats-server, which may take the core before the send returns); `ReplicaManager._read_fetch` the
first of the brokers' own functions (9% cumulative, 2% its own: every fetch of a session steps each of its ~6
partitions, unchanged ones included, as Kafka's fetch session does); pydantic's validation 1.4%; the events (emit,
the outbox's writes, encoding) about 5%; the rest below 1% each. At 16 KiB (20,000 records, perf on two brokers):
libpython 56%, the kernel 24-27%, libc 12-13% (nearly all memmove), crc32c 1.3-1.5%. The copies a 1 MB answer to a
follower makes on the leader: msgpack's packing and its bytes, nats-py's `pub_cmd` (header + payload + CRLF: two
more), Python 3.11's `writelines` joining the flusher's pending list (one more), then the socket. Cutting them means
changing nats-py's publish path; not done. librdkafka's busy-poll while a Produce is unanswered, read in its source
(`rd_kafka_toppar_producer_serve`, 2.x): when a partition's batch is ready (and always while flushing, the linger
being 1 us then), `rd_kafka_msgq_allow_wakeup_at` asks its broker thread to wake at once, yet the idempotent
in-flight limit lets nothing out, so the thread turns until the answer comes; nothing a broker answers changes that.
Nor does the benchmark's order hold the 16 KiB figure down: the throughput runs on a fresh cluster each, in the
bench's order (own 100 B, own 16 KiB, confluent-kafka 100 B, confluent-kafka 16 KiB) or with the two 16 KiB runs
swapped (/work/prof/s34/order16.py, three of each, alternating): confluent-kafka at 0.92 / 0.85 / 0.80 of the own
client in the bench's order, 0.83 / 0.93 / 0.95 swapped (125-144 against 149-163 MB/s).
What the events cost the p99, later that day (the harness, a cluster with emission off (`BenchCluster(events=False)`,
the benchmark-only setting) and one with it on, alternating, three runs each of three pairs): on 10.1-19.1 ms, median
11.7; off 8.9-15.0 ms, median 10.2 (p50 6.0-7.6 against 5.8-6.4). So emission, relaying to the EVENTS stream and
archiving hold about 1.5 ms of the p99, and without them the goal is met in about half the runs: the next lead for
it, after the hops themselves. Of that, the archiver (now behind) holds little: with it stopped (SIGSTOP) for the
runs, p99 9.4-11.7 ms, median 10.1, against 10.0-13.2, median 10.5 (three pairs of three runs), so the rest is the
brokers' emission and relaying and JetStream's storing. `hightide bench --workload kafka` on that quicker machine,
three runs: confluent-kafka p99 10.61 / 12.19 / 11.63 ms (the own client's 11.37 / 15.22 / 12.62), 16 KiB 117.4 /
124.3 / 131.8 MB/s against 154.5 / 154.2 / 150.8, 100 B 358k / 359k / 365k against 273k / 270k / 276k records/s.

Twelfth pass (2026-11-30; the 16 KiB figure, measured apart). A harness (/work/prof/s37/p16.py, not committed) ran
10,000 records of 16 KiB per client on one fresh cluster, each process's CPU read from /proc around each run.
Unconfined, the cluster used its two CPUs in every run (the own client: 1.04 s for 160 MB, 2.0 s of CPU in all; the
client 0.29 s of it); confluent-kafka's client took 0.70 s of CPU in 1.19 s, the brokers and nats-server alike in
both (1.7-1.8 s). Records spread evenly over the partitions (librdkafka's sticky.partitioning.linger.ms 0, 1,560-1,723
records each against 289-5,966 with its default) made no difference (122.1 and 105.4 MB/s against 121.4 and 89.6,
the own client 148.5), so the sticky partitioner's runs (tenth pass) are not what holds the figure. With this process
on one CPU and the cluster on the other (`client_apart`), librdkafka's client took a whole CPU (1.63 s in 1.64 s: its
busy-poll) and the figures met: own client 96.6 / 105.1 MB/s, confluent-kafka 100.0 / 99.5. So the listener serves
16 KiB as fast as the NATS front door, and what the shared-CPU figure measures beside it is librdkafka's busy-poll
taking the brokers' CPU: the benchmark now prints the two runs apart too. `hightide bench --workload kafka`, six
runs this day: confluent-kafka 16 KiB 124.9 / 123.7 / 123.2 / 122.1 / 153.7 / 154.0 MB/s against the own client's
130.7 / 141.5 / 145.2 / 153.7 / 163.9 / 156.5; apart (the last three) 103.3 / 112.3 / 102.6 against 103.5 / 111.0 /
97.9; p99 11.29 / 9.27 / 9.03 / 11.04 / 8.14 / 9.57 ms (the own client's 12.92 / 10.55 / 10.33 / 11.04 / 8.95 /
9.67); 100 B 318k-424k against 258k-307k records/s.

Thirteenth pass (2026-11-30; the throughput runs on librdkafka's default producer). The harness of the twelfth pass
with a third producer, enable.idempotence off (/work/prof/s37/p16d.py, not committed), 16 KiB, on one cluster:
without idempotence 193.7 / 189.0 / 120.3 MB/s, the client 0.14 / 0.16 / 0.12 s of CPU; idempotent 160.7 / 113.1
MB/s, the client 0.60 / 1.05 s; the own client 171.8 / 177.0 / 109.5 MB/s (the machine slowed for the last three).
The goals are now judged on the defaults, as the latency's has been since the eighth pass (`producer_config`), and
the idempotent producer's throughput is printed beside them. `hightide bench --workload kafka`, five runs:
confluent-kafka 16 KiB 182.9 / 199.3 / 196.1 / 175.3 / 171.8 MB/s against the own client's 162.1 / 162.8 / 149.4 /
151.2 / 147.9 (idempotent 127.1 / 152.6 / 165.7 / 131.8 / 130.3); 100 B 482k / 518k / 476k / 491k / 486k against
280k / 300k / 296k / 279k / 267k records/s (idempotent 373k-413k); p99 8.56 / 9.62 / 10.23 / 10.44 / 9.17 ms (the
own client's 10.24 / 9.83 / 10.58 / 11.62 / 11.52; idempotent 8.54-10.84); apart, idempotent 101.6 / 99.3 / 93.0
/ 95.0 / 95.1 against 89.7 / 97.7 / 91.0 / 95.0 / 100.5. Four more runs an hour later, quiet: 16 KiB 174.2 / 183.7 /
175.2 / 187.8 MB/s against 157.6 / 156.2 / 153.4 / 153.9; 100 B 496k / 575k / 504k / 570k against 303k / 311k / 298k
/ 305k; p99 9.26 / 8.40 / 8.71 / 9.08 ms (the own client's 9.55 / 8.99 / 9.12 / 9.79). Where a record's time goes
(its produce stamp and arrival joined to the brokers' events on the one monotonic clock; one run, p50 5.43, p99 8.38
ms): produce() to the leader's append p50 3.41 / p99 6.23 ms (linger.ms 5, librdkafka's wake-up and send, 0.23 ms in
the listener), append to HW 1.42 / 2.53 (two NATS hops of ~0.6 ms each, ~0.3 ms of each the transport), HW to the
consumer's Fetch answered 0.08 / 0.14, to Python 0.33 / 0.63: the brokers hold ~2-2.5 ms of the tail.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from hightide.client import bench_cluster
from hightide.client.admin import Admin
from hightide.client.bench_nats import LARGE_RECORD_BYTES, RECORD_BYTES, BaselineResult, LatencyResult, latency_result
from hightide.client.connection import ClusterConnection
from hightide.client.group_member import OFFSETS_TOPIC

KAFKA_PRODUCE_COUNT: Final = 300_000
KAFKA_LARGE_PRODUCE_COUNT: Final = 10_000
KAFKA_REFERENCE_RECORDS_PER_S: Final = 400_000.0  # issue 15: confluent-kafka against a real Kafka 4.0 cluster
DELIVERY_DEADLINE_S: Final = 120.0
POLL_S: Final = 0.05  # librdkafka's poll timeout inside loops bounded by a deadline
# The shortest wait of the latency run's schedule. librdkafka's poll takes whole milliseconds (a timeout under one
# returns at once), so waiting out the 0.1 ms between two records at 10,000/s with the time left spun the producing
# thread: up to a core, of the two the brokers, nats-server and the client share, inside the measured window (issue
# 15). The records that fall due during the wait are then produced together, each stamped as it is produced (the
# latency counts from there), as Kafka's ProducerPerformance throttles: it sleeps once 2 ms of sleep are owed.
PACING_WAIT_MIN_S: Final = 0.001
_STAMP: Final = struct.Struct(">q")
_WARM_UP: Final = -1  # the stamp of a warm-up record (perf_counter_ns is never negative)


@dataclass(frozen=True)
class KafkaFigures:
    own: list[BaselineResult]  # own client: 100 B, 16 KiB
    own_latency: LatencyResult
    kafka: list[BaselineResult]  # confluent-kafka over the listener, librdkafka's defaults: 100 B, 16 KiB (the goal's)
    kafka_idempotent: list[BaselineResult]  # the same with idempotence on, beside them
    kafka_latency: LatencyResult  # librdkafka's defaults (no idempotence): the goal's figure
    kafka_latency_idempotent: LatencyResult  # idempotence on, beside it
    # 16 KiB with the client on a CPU of its own and the cluster on the others: (own client, confluent-kafka
    # idempotent); None where this process has fewer than two CPUs or cannot set affinity (`client_apart_cpus`)
    apart: tuple[BaselineResult, BaselineResult] | None = None


def producer_config(bootstrap: str, *, idempotent: bool = False) -> dict[str, Any]:
    """The producer of the goals' runs: the one a Python user gets from `Producer({"bootstrap.servers": ...})`,
    librdkafka's defaults (acks=all, linger.ms 5, enable.idempotence false), its local queue made large enough that
    the throughput runs' records fit (as they do in the own client's); with `idempotent`, enable.idempotence on,
    measured beside it and judged by no goal.

    Why the goals are judged on the defaults: librdkafka's idempotent producer lets a partition send while fewer
    than 5 *messages* (not requests) are in flight (`rd_kafka_toppar_producer_serve`: RD_KAFKA_IDEMP_MAX_INFLIGHT -
    rktp_msgs_inflight), and it sets the broker thread's next wake-up from the batch's linger.ms before that check;
    so once a batch's linger has passed while the partition's last Produce is unanswered, the broker thread polls with
    no timeout until the answer comes: a busy loop for every round trip (perf: do_sys_poll, clock_gettime and
    rd_kafka_toppar_producer_serve in the rdk:broker threads; ~300 voluntary and ~1,500 involuntary context switches
    per thread in 6 s). Against Kafka a round trip takes 1-2 ms and the spin is short; here the client shares the two
    cores with the brokers, and its three broker threads took 1.7-3.3 s of CPU in each 5-s latency run, as much as a
    broker, from the brokers whose round trip it waits on; in a 16 KiB throughput run 0.6-1.05 s of CPU against
    0.12-0.16 s without idempotence (thirteenth pass). Kafka's EndToEndLatency sets linger.ms 0, but it sends one
    record and waits for it; at a fixed rate of 10,000/s linger.ms 0 doubles the Produce requests the brokers serve
    (each request of a partition then carries what came in while the one before it was answered) and adds latency."""
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": idempotent,
        "linger.ms": 5,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
    }


def consumer_config(bootstrap: str) -> dict[str, Any]:
    """The latency consumer as a Python user points it at Kafka: librdkafka's defaults, fetch.wait.max.ms (500)
    included. A Fetch parked on it is answered as soon as the high watermark passes its offset (Kafka's
    DelayedFetch), so a short wait buys no latency; it would only make each broker serve empty fetches."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-latency-{os.getpid()}",  # required by the client; the partitions are assigned
        "enable.auto.commit": False,
    }


def kafka_throughput(bootstrap: str, topic: str, count: int, size: int, *, idempotent: bool = False) -> BaselineResult:
    """`count` records of `size` bytes produced with confluent-kafka (`producer_config`), every delivery report a
    success.

    The window opens once the producer is ready to send, as the own client's does (`Producer.__aenter__` acquires
    its producer id before `produce_throughput` starts its clock): one warm-up record of the same size, outside the
    window and not counted, makes librdkafka connect, read the topic's metadata and acquire its producer id. That
    start-up took about 0.6 s here with idempotence, most of it librdkafka's own: its idempotence state machine finds
    no broker connection up yet just after the bootstrap's metadata answer and retries on a 500 ms timer
    ("Coordinator not up"), which a connection coming up does not cut short. It is the same against Kafka."""
    from confluent_kafka import Producer  # noqa: PLC0415 (the Kafka client is only needed by this workload)

    producer = Producer(producer_config(bootstrap, idempotent=idempotent))
    value = os.urandom(size)
    failures: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    producer.produce(topic, value, on_delivery=delivered)
    if producer.flush(DELIVERY_DEADLINE_S) or failures:
        raise RuntimeError(f"the warm-up record was not delivered: {failures[:1] or 'deadline passed'}")
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: serve delivery reports, then try again
                producer.poll(POLL_S)
        producer.poll(0)
    left = producer.flush(DELIVERY_DEADLINE_S)
    seconds = time.perf_counter() - started
    if left or failures:
        raise RuntimeError(f"{left} records undelivered and {len(failures)} failed, first: {failures[:1]}")
    return BaselineResult(f"{_client_label(idempotent)} acks=all RF=3 {_size_label(size)}", count, seconds, size)


def kafka_latency(
    bootstrap: str, topic: str, partitions: int, rate_per_s: int, duration_s: float, *, idempotent: bool = False
) -> LatencyResult:
    """Records stamped with perf_counter_ns, produced at `rate_per_s`; a consumer measures arrival minus stamp.

    Before the schedule starts, as Kafka's EndToEndLatency positions its consumer before its first send, one
    warm-up record (stamped `_WARM_UP`, not measured) goes to each partition and the consumer reads all of them: the
    producer has its producer id and metadata and the consumer is fetching every partition, so the first second of
    the schedule is not spent connecting (at 10,000 records/s that second is a fifth of the samples: the p99)."""
    from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: PLC0415 (as above)

    samples = max(1, round(rate_per_s * duration_s))
    padding = os.urandom(RECORD_BYTES - _STAMP.size)
    consumer = Consumer(consumer_config(bootstrap))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    latencies: list[int] = []
    warmed: list[int] = []  # the partitions whose warm-up record the consumer has read
    stop = threading.Event()

    def consume() -> None:
        deadline = time.monotonic() + duration_s + 2 * DELIVERY_DEADLINE_S
        while len(latencies) < samples and not stop.is_set() and time.monotonic() < deadline:
            # One record per poll, as soon as it is there (consume(n) would hold records back until n arrive).
            message = consumer.poll(POLL_S)
            if message is None or message.error() is not None or (value := message.value()) is None:
                continue
            arrived = time.perf_counter_ns()
            stamp = _STAMP.unpack_from(value)[0]
            if stamp == _WARM_UP:
                warmed.append(message.partition() or 0)
            else:
                latencies.append(arrived - stamp)

    reader = threading.Thread(target=consume, name="bench-kafka-consumer", daemon=True)
    producer = Producer(producer_config(bootstrap, idempotent=idempotent))
    try:
        reader.start()
        for partition in range(partitions):
            producer.produce(topic, _STAMP.pack(_WARM_UP) + padding, partition=partition)
        if producer.flush(DELIVERY_DEADLINE_S):
            raise RuntimeError("the warm-up records were not delivered before the deadline")
        deadline = time.monotonic() + DELIVERY_DEADLINE_S
        while len(set(warmed)) < partitions:
            if time.monotonic() > deadline or not reader.is_alive():
                raise RuntimeError(f"the consumer read {len(set(warmed))} of {partitions} warm-up records")
            producer.poll(POLL_S)
        begin = time.perf_counter_ns() + 10_000_000
        for index in range(samples):
            due = begin + index * 1_000_000_000 // rate_per_s
            while (delay := due - time.perf_counter_ns()) > 0:
                producer.poll(min(max(delay / 1e9, PACING_WAIT_MIN_S), POLL_S))
            producer.produce(topic, _STAMP.pack(time.perf_counter_ns()) + padding)
            producer.poll(0)
        producer.flush(DELIVERY_DEADLINE_S)
        reader.join(DELIVERY_DEADLINE_S)
    finally:
        stop.set()
        reader.join(DELIVERY_DEADLINE_S)
        consumer.close()
    if len(latencies) < samples:
        raise RuntimeError(f"consumed {len(latencies)} of {samples} records before the deadline")
    return latency_result(
        f"{_client_label(idempotent)} produce->consume {_size_label(RECORD_BYTES)}", rate_per_s, latencies
    )


def find_group_coordinator(bootstrap: str, topic: str) -> None:
    """What Kafka's EndToEndLatency does before its first send (`consumer.position` of a group consumer asks the
    group coordinator for the committed offsets): the latency consumer's group coordinator is found, which on a
    fresh cluster creates the offsets topic (offsets.topic.num.partitions, 50)."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415 (as above)

    consumer = Consumer(consumer_config(bootstrap))
    try:
        consumer.committed([TopicPartition(topic, 0)], timeout=DELIVERY_DEADLINE_S)
    finally:
        consumer.close()


async def offsets_topic_ready(conn: ClusterConnection) -> None:
    """Every partition of the offsets topic has a leader and a full ISR: its creation (a log per partition on each
    broker, fsynced) is over before either client's latency is measured."""
    admin = Admin(conn)

    async def full_isr() -> bool:
        described = await admin.describe_topics((OFFSETS_TOPIC,))
        if not described.topics or described.topics[0].error != 0:
            return False
        return all(p.leader >= 0 and len(p.isr) == 3 for p in described.topics[0].partitions)

    deadline = time.monotonic() + bench_cluster.READY_DEADLINE_S
    while not await full_isr():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for a full ISR on every partition of {OFFSETS_TOPIC}")
        await asyncio.sleep(bench_cluster.POLL_INTERVAL_S)


async def run_kafka_bench(work: Path, duration_scale: float = 1.0) -> KafkaFigures:
    """Every figure of the table above, on one fresh cluster; `duration_scale` sizes the counts and the latency run."""

    def scaled(count: int) -> int:
        return max(1, round(count * duration_scale))

    cluster = bench_cluster.BenchCluster(work)
    async with cluster as conn:
        state = cluster.local.read_state()
        assert state is not None, "the cluster has just been started"
        bootstrap = ",".join(state.kafka_listeners[broker] for broker in sorted(state.kafka_listeners))
        small = await bench_cluster.produce_throughput(conn, "bench-100b", scaled(KAFKA_PRODUCE_COUNT), RECORD_BYTES)
        large = await bench_cluster.produce_throughput(
            conn, "bench-16k", scaled(KAFKA_LARGE_PRODUCE_COUNT), LARGE_RECORD_BYTES
        )

        async def confluent_throughput(idempotent: bool) -> list[BaselineResult]:
            """100 B, then 16 KiB, each on a topic of its own."""
            runs = []
            for name, count, size in (
                ("100b", KAFKA_PRODUCE_COUNT, RECORD_BYTES),
                ("16k", KAFKA_LARGE_PRODUCE_COUNT, LARGE_RECORD_BYTES),
            ):
                topic = f"kafka-{name}-idempotent" if idempotent else f"kafka-{name}"
                await bench_cluster.create_topic(conn, topic)
                runs.append(
                    await asyncio.to_thread(
                        kafka_throughput, bootstrap, topic, scaled(count), size, idempotent=idempotent
                    )
                )
            return runs

        on_defaults_runs = await confluent_throughput(idempotent=False)
        idempotent_runs = await confluent_throughput(idempotent=True)
        for topic in ("kafka-latency", "kafka-latency-idempotent"):
            await bench_cluster.create_topic(conn, topic)
        # Both latency runs on the same cluster: with the offsets topic that the confluent consumer's group needs.
        await asyncio.to_thread(find_group_coordinator, bootstrap, "kafka-latency")
        await offsets_topic_ready(conn)
        own_latency = await bench_cluster.produce_to_consume_latency(
            conn, "bench-latency", bench_cluster.LATENCY_RATE_PER_S, bench_cluster.LATENCY_SECONDS * duration_scale
        )
        latencies: list[LatencyResult] = []
        for topic, idempotent in (("kafka-latency", False), ("kafka-latency-idempotent", True)):
            latencies.append(
                await asyncio.to_thread(
                    kafka_latency,
                    bootstrap,
                    topic,
                    bench_cluster.PARTITIONS,
                    bench_cluster.LATENCY_RATE_PER_S,
                    bench_cluster.LATENCY_SECONDS * duration_scale,
                    idempotent=idempotent,
                )
            )
        apart: tuple[BaselineResult, BaselineResult] | None = None
        cpus = client_apart_cpus()
        if cpus is not None:  # last: the runs above had the whole machine, as a user's client and cluster do
            await bench_cluster.create_topic(conn, "kafka-16k-apart")
            count = scaled(KAFKA_LARGE_PRODUCE_COUNT)
            with client_apart(state.pids(), *cpus):
                own_apart = await bench_cluster.produce_throughput(conn, "bench-16k-apart", count, LARGE_RECORD_BYTES)
                kafka_apart = await asyncio.to_thread(
                    kafka_throughput, bootstrap, "kafka-16k-apart", count, LARGE_RECORD_BYTES, idempotent=True
                )
            apart = (own_apart, kafka_apart)
    on_defaults, with_idempotence = latencies
    return KafkaFigures(
        [small, large], own_latency, on_defaults_runs, idempotent_runs, on_defaults, with_idempotence, apart
    )


def client_apart_cpus() -> tuple[set[int], set[int]] | None:
    """(the client's CPU, the cluster's CPUs) for the runs with the client apart: the first CPU this process may
    use, and the rest; None with fewer than two, or where the system has no sched_setaffinity (not Linux)."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return ({cpus[0]}, set(cpus[1:])) if len(cpus) >= 2 else None


def _threads(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:  # the process has ended
        return []


def _set_affinity(pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` on `cpus` (sched_setaffinity moves one thread: a process's other threads keep theirs,
    and a thread started later takes its starter's)."""
    for tid in _threads(pid):
        with contextlib.suppress(OSError):  # the thread has ended meanwhile
            os.sched_setaffinity(tid, cpus)


@contextlib.contextmanager
def client_apart(cluster: Iterable[int], client_cpus: set[int], cluster_cpus: set[int]) -> Iterator[None]:
    """For the block, every thread of this process (the client's: librdkafka's threads start from it) on
    `client_cpus` and every thread of the `cluster` processes on `cluster_cpus`; each process's threads are given
    back the CPUs its main thread had before, threads started in the block included."""
    pids = [os.getpid(), *cluster]
    before: dict[int, set[int]] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            before[pid] = os.sched_getaffinity(pid)
    try:
        for pid in before:
            _set_affinity(pid, client_cpus if pid == os.getpid() else cluster_cpus)
        yield
    finally:
        for pid, cpus in before.items():
            _set_affinity(pid, cpus)


def _client_label(idempotent: bool) -> str:
    return "confluent-kafka idempotent" if idempotent else "confluent-kafka"


def _size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 and size % 1024 == 0 else f"{size} B"
