"""Differential check, run by hand: `hightide.core.assignors` against Kafka's own assignor code, case by case.

Not part of the pytest run (it needs a JDK, a git clone of apache/kafka and an slf4j-api jar). It compiles
Kafka's `AbstractStickyAssignor` (and what it needs) straight from the clone's clients/src/main/java, plus
copies of `RangeAssignor` and `RoundRobinAssignor` with their two utility imports inlined, and `Harness.java`;
then draws random groups from a seed, runs every group through both, and compares each member's partition
list (order included) and the partitions transferring ownership.

Usage: python run.py KAFKA_GIT_DIR SLF4J_API_JAR [CASES [SEED [big]]]
  "big" draws second-round groups (owned partitions from a first round, members leaving, joining, changing
  subscriptions, a few stale generations) for the sticky strategies.

A mismatch where Kafka's answer is invalid (a partition for a member not subscribed to its topic) or Kafka
throws is counted apart: those are the inputs where Hightide departs from Kafka on purpose (see
`hightide.core.assignors._sticky`). So is the one-topic order departure: a mismatch that goes away when each
member's owned partitions are handed in sorted by (partition, topic), the order Kafka 3.8 (KAFKA-16277) sorts
them in, where Hightide keeps a member's own order when they are all of one topic.
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from hightide.core.assignors import STRATEGIES, Subscription, TopicPartition, assign
from hightide.core.assignors._java import java_string_key

HERE = Path(__file__).parent
CONSUMER = "clients/src/main/java/org/apache/kafka/clients/consumer"


def build(kafka_git_dir: str, slf4j_jar: str, work: Path) -> str:
    """Compile the harness against the clone's sources; returns the java classpath."""
    archive = subprocess.run(
        ["git", "-C", kafka_git_dir, "archive", "HEAD", "clients/src/main/java"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "x", "-C", str(work)], input=archive, check=True)
    metadata = work / CONSUMER / "ConsumerGroupMetadata.java"  # drop its one link to the generated messages
    text = metadata.read_text().replace("import org.apache.kafka.common.requests.JoinGroupRequest;", "")
    text = text.replace("JoinGroupRequest.UNKNOWN_MEMBER_ID", '""').replace(
        "JoinGroupRequest.UNKNOWN_GENERATION_ID", "-1"
    )
    metadata.write_text(text)
    copies = work / "h"
    copies.mkdir()
    for name in ("RangeAssignor", "RoundRobinAssignor"):
        source = (work / CONSUMER / f"{name}.java").read_text()
        source = source.replace("package org.apache.kafka.clients.consumer;", "package h;\n" + _H_IMPORTS, 1)
        source = source.replace(
            "import org.apache.kafka.clients.consumer.internals.Utils.TopicPartitionComparator;", ""
        )
        source = re.sub(
            r"new TopicPartitionComparator\(\)",
            "Comparator.comparing(TopicPartition::topic).thenComparing(TopicPartition::partition)",
            source,
        )
        source = source.replace(
            "TopicPartitionComparator PARTITION_COMPARATOR", "Comparator<TopicPartition> PARTITION_COMPARATOR"
        )
        source = source.replace("import org.apache.kafka.common.utils.Utils;", "")
        source = source.replace("import org.apache.kafka.common.utils.CircularIterator;", "")
        source = source.replace("Utils.sorted(memberInfoList)", "sortedCopy(memberInfoList)")
        if name == "RoundRobinAssignor":
            source = source.rstrip().rstrip("}") + _SORTED_COPY
        (copies / f"{name}.java").write_text(source)
    circular = subprocess.run(
        [
            "git",
            "-C",
            kafka_git_dir,
            "show",
            "HEAD:clients/src/main/java/org/apache/kafka/common/utils/CircularIterator.java",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.replace("package org.apache.kafka.common.utils;", "package h;")
    (copies / "CircularIterator.java").write_text(circular)
    out = work / "out"
    out.mkdir()
    sources = [str(HERE / "Harness.java"), *(str(p) for p in copies.glob("*.java"))]
    # javac reports errors for unrelated classes the source path reaches (generated messages, compression
    # libraries) but still writes every class the harness needs; compare() fails loudly if one is missing.
    subprocess.run(
        [
            "javac",
            "-nowarn",
            "-d",
            str(out),
            "-cp",
            slf4j_jar,
            "-sourcepath",
            str(work / "clients/src/main/java"),
            *sources,
        ],
        check=False,  # expected to report errors (above)
        capture_output=True,
    )
    return f"{out}:{slf4j_jar}"


_H_IMPORTS = (
    "import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;\n"
    "import java.util.Comparator;\nimport java.util.Collections;\nimport java.util.ArrayList;\nimport java.util.List;"
)
_SORTED_COPY = """
    static <T extends Comparable<? super T>> List<T> sortedCopy(List<T> l) {
        List<T> r = new ArrayList<>(l); Collections.sort(r); return r;
    }
}
"""

Case = tuple[str, dict[str, int], dict[str, Subscription]]


def _name(rng: random.Random, prefix: str) -> str:
    kind = rng.random()
    if kind < 0.4:
        return f"{prefix}{rng.randrange(40)}"
    if kind < 0.7:
        return f"{prefix}-{rng.randrange(10**6):x}"
    return "q" + "".join(rng.choice("abcAaBBxyz019_-") for _ in range(rng.randrange(0, 8)))


def small_case(rng: random.Random) -> Case:
    strategy = rng.choice(STRATEGIES)
    topics = list(dict.fromkeys(_name(rng, "t") for _ in range(rng.randrange(1, 7))))
    counts = {t: rng.randrange(0, 9) for t in topics}
    members = list(dict.fromkeys(_name(rng, "c") for _ in range(rng.randrange(1, 9))))
    equal = rng.random() < 0.4
    base = rng.sample(topics, rng.randrange(1, len(topics) + 1))
    everything = [(t, p) for t in topics for p in range(counts[t])]
    claimed: set[TopicPartition] = set()
    subscriptions: dict[str, Subscription] = {}
    instance_ids: set[str] = set()
    for m in members:
        topics_of_m = base if equal else rng.sample(topics, rng.randrange(1, len(topics) + 1))
        generation = rng.choice([-1, 1, 2, 3, 3, 3])
        owned = [
            tp
            for tp in rng.sample(everything, min(len(everything), rng.randrange(0, 6)))
            if tp not in claimed or rng.random() < 0.2
        ]
        claimed.update(owned)
        instance_id = f"i{rng.randrange(20)}" if rng.random() < 0.25 else None
        if instance_id in instance_ids:
            instance_id = None
        if instance_id is not None:
            instance_ids.add(instance_id)
        subscriptions[m] = Subscription(topics_of_m, owned, generation, instance_id)
    return strategy, counts, subscriptions


def big_case(rng: random.Random) -> Case:
    strategy = rng.choice(["sticky", "cooperative-sticky"])
    topics = [f"t{i}" for i in range(rng.randrange(2, 7))]
    counts = {t: rng.randrange(1, 13) for t in topics}
    members = list(dict.fromkeys(_name(rng, "c") for _ in range(rng.randrange(3, 13))))
    first = {m: Subscription(rng.sample(topics, rng.randrange(1, len(topics) + 1))) for m in members}
    previous = assign(strategy, counts, first).partitions
    second: dict[str, Subscription] = {}
    for m in members:
        if rng.random() < 0.2:
            continue  # left the group
        topics_of_m = first[m].topics if rng.random() < 0.6 else rng.sample(topics, rng.randrange(1, len(topics) + 1))
        second[m] = Subscription(topics_of_m, previous[m], 5 if rng.random() < 0.9 else 4)
    for _ in range(rng.randrange(0, 3)):
        second[_name(rng, "n")] = Subscription(rng.sample(topics, rng.randrange(1, len(topics) + 1)))
    return strategy, counts, second or first


def _encode(cases: list[Case]) -> str:
    lines = []
    for strategy, counts, subscriptions in cases:
        lines.append(f"CASE {strategy}")
        lines.extend(f"T {t} {c}" for t, c in counts.items())
        for m, s in subscriptions.items():
            owned = ",".join(f"{t}:{p}" for t, p in s.owned_partitions) or "-"
            lines.append(f"M {m} {s.generation} {s.group_instance_id or '-'} {','.join(s.topics) or '-'} {owned}")
        lines.append("END")
    return "\n".join(lines) + "\n"


def _kafka_invalid(answer: list[str], subscriptions: dict[str, Subscription]) -> bool:
    for line in answer:
        if line.startswith("ERROR"):
            return True
        if line.startswith("A "):
            _, member, parts = (line + " ").split(" ", 2)
            if any(
                tp.rsplit(":", 1)[0] not in subscriptions[member].topics
                for tp in filter(None, parts.strip().split(","))
            ):
                return True
    return False


def compare(classpath: str, cases: list[Case]) -> dict[str, list[int]]:
    output = subprocess.run(
        ["java", "-cp", classpath, "Harness"], input=_encode(cases), capture_output=True, text=True, check=True
    ).stdout
    blocks = output.split("DONE\n")
    assert len(blocks) == len(cases) + 1, "the harness answered every case"
    tally: dict[str, list[int]] = {}
    for (strategy, counts, subscriptions), block in zip(cases, blocks, strict=False):
        ours = _answer(strategy, counts, subscriptions)
        kafka = [line for line in block.splitlines() if line and not line.startswith("SLF4J")]
        row = tally.setdefault(strategy, [0, 0, 0, 0])  # equal, Kafka invalid or throws, different, own order
        if ours == kafka:
            row[0] += 1
        elif _kafka_invalid(kafka, subscriptions):
            row[1] += 1
        elif _answer(strategy, counts, _owned_sorted(subscriptions)) == kafka:
            row[3] += 1
        else:
            row[2] += 1
            print("DIFFERENT", strategy, counts, subscriptions, "\n  hightide", ours, "\n  kafka   ", kafka)
    return tally


def _answer(strategy: str, counts: dict[str, int], subscriptions: dict[str, Subscription]) -> list[str]:
    result = assign(strategy, counts, subscriptions)
    ours = [f"A {m} " + "".join(f"{t}:{p}," for t, p in result.partitions[m]) for m in sorted(result.partitions)]
    return ours + sorted(f"X {t}:{p} {m}" for (t, p), m in result.transferring.items())


def _owned_sorted(subscriptions: dict[str, Subscription]) -> dict[str, Subscription]:
    """Each member's owned partitions in KAFKA-16277's order, (partition, topic)."""
    return {
        m: Subscription(
            s.topics,
            sorted(s.owned_partitions, key=lambda tp: (tp[1], java_string_key(tp[0]))),
            s.generation,
            s.group_instance_id,
        )
        for m, s in subscriptions.items()
    }


def main() -> None:
    kafka_git_dir, slf4j_jar = sys.argv[1], sys.argv[2]
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 1)
    draw = big_case if len(sys.argv) > 5 and sys.argv[5] == "big" else small_case
    with tempfile.TemporaryDirectory() as work:
        classpath = build(kafka_git_dir, slf4j_jar, Path(work))
        tally = compare(classpath, [draw(rng) for _ in range(count)])
    for strategy, (same, kafka_invalid, different, own_order) in sorted(tally.items()):
        print(
            f"{strategy:20} equal {same:5}  Kafka invalid/throws {kafka_invalid:4}  one-topic own order {own_order:4}"
            f"  different {different}"
        )
    sys.exit(1 if any(row[2] for row in tally.values()) else 0)


if __name__ == "__main__":
    main()
