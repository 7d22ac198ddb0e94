// Differential harness: runs Kafka's own assignor code on the cases run.py writes to stdin, one per block:
//   CASE <strategy> / T <topic> <count> ... / M <member> <generation> <instance|-> <topics,|-> <topic:p,|-> ... / END
// and prints each member's partitions in Kafka's list order, then the partitions transferring ownership.
// Sticky and Coop are AbstractStickyAssignor with the member data read from the subscription (what
// CooperativeStickyAssignor does for ConsumerProtocolSubscription v2+), so that no serialization classes are
// needed; Coop copies CooperativeStickyAssignor's adjustAssignment and computePartitionsTransferringOwnership.
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.internals.AbstractStickyAssignor;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
public class Harness {
    static class Sticky extends AbstractStickyAssignor {
        public String name() { return "sticky"; }
        protected MemberData memberData(Subscription s) {
            return new MemberData(s.ownedPartitions(), s.generationId());
        }
    }
    static class Coop extends AbstractStickyAssignor {
        public String name() { return "cooperative-sticky"; }
        protected MemberData memberData(Subscription s) {
            return new MemberData(s.ownedPartitions(), s.generationId());
        }
        public Map<TopicPartition, String> lastTransferring;
        @Override
        public Map<String, List<TopicPartition>> assignPartitions(Map<String, List<PartitionInfo>> partitionsPerTopic,
                                                                  Map<String, Subscription> subscriptions) {
            Map<String, List<TopicPartition>> assignments = super.assignPartitions(partitionsPerTopic, subscriptions);
            Map<TopicPartition, String> t = super.partitionsTransferringOwnership == null ?
                computePartitionsTransferringOwnership(subscriptions, assignments) : super.partitionsTransferringOwnership;
            lastTransferring = t;
            for (Map.Entry<TopicPartition, String> e : t.entrySet()) assignments.get(e.getValue()).remove(e.getKey());
            return assignments;
        }
        private Map<TopicPartition, String> computePartitionsTransferringOwnership(Map<String, Subscription> subscriptions,
                                                                                   Map<String, List<TopicPartition>> assignments) {
            Map<TopicPartition, String> allAddedPartitions = new HashMap<>();
            Set<TopicPartition> allRevokedPartitions = new HashSet<>();
            for (final Map.Entry<String, List<TopicPartition>> entry : assignments.entrySet()) {
                String consumer = entry.getKey();
                List<TopicPartition> ownedPartitions = subscriptions.get(consumer).ownedPartitions();
                List<TopicPartition> assignedPartitions = entry.getValue();
                Set<TopicPartition> ownedPartitionsSet = new HashSet<>(ownedPartitions);
                for (TopicPartition tp : assignedPartitions) if (!ownedPartitionsSet.contains(tp)) allAddedPartitions.put(tp, consumer);
                Set<TopicPartition> assignedPartitionsSet = new HashSet<>(assignedPartitions);
                for (TopicPartition tp : ownedPartitions) if (!assignedPartitionsSet.contains(tp)) allRevokedPartitions.add(tp);
            }
            allAddedPartitions.keySet().retainAll(allRevokedPartitions);
            return allAddedPartitions;
        }
    }
    static List<String> split(String s) { return s.equals("-") ? new ArrayList<>() : new ArrayList<>(Arrays.asList(s.split(","))); }
    public static void main(String[] a) throws Exception {
        java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
        String line; String strategy = null; Map<String,Integer> counts = null; Map<String,Subscription> subs = null;
        while ((line = in.readLine()) != null) {
            String[] f = line.split(" ");
            if (f[0].equals("CASE")) { strategy = f[1]; counts = new HashMap<>(); subs = new HashMap<>(); }
            else if (f[0].equals("T")) counts.put(f[1], Integer.parseInt(f[2]));
            else if (f[0].equals("M")) {
                List<TopicPartition> owned = new ArrayList<>();
                for (String tp : split(f[5])) { int i = tp.lastIndexOf(':'); owned.add(new TopicPartition(tp.substring(0, i), Integer.parseInt(tp.substring(i + 1)))); }
                Subscription s = new Subscription(split(f[4]), null, owned, Integer.parseInt(f[2]), Optional.empty());
                if (!f[3].equals("-")) s.setGroupInstanceId(Optional.of(f[3]));
                subs.put(f[1], s);
            } else if (f[0].equals("END")) {
                // the production path: subscribed topics with partitions, in the order of the HashSet of subscribed topics
                Set<String> all = new HashSet<>();
                for (Subscription s : subs.values()) all.addAll(s.topics());
                Map<String,Integer> ppt = new HashMap<>();
                for (String t : all) { Integer c = counts.get(t); if (c != null && c > 0) ppt.put(t, c); }
                Map<String, List<TopicPartition>> r; Map<TopicPartition,String> tr = new HashMap<>();
                try {
                    if (strategy.equals("range")) r = new h.RangeAssignor().assign(ppt, subs);
                    else if (strategy.equals("roundrobin")) r = new h.RoundRobinAssignor().assign(ppt, subs);
                    else if (strategy.equals("sticky")) r = new Sticky().assign(ppt, subs);
                    else { Coop c = new Coop(); r = c.assign(ppt, subs); tr = c.lastTransferring; }
                } catch (Throwable e) { System.out.println("ERROR " + e); System.out.println("DONE"); continue; }
                for (String m : new TreeSet<>(r.keySet())) {
                    StringBuilder sb = new StringBuilder("A " + m + " ");
                    for (TopicPartition tp : r.get(m)) sb.append(tp.topic()).append(':').append(tp.partition()).append(',');
                    System.out.println(sb);
                }
                List<String> xs = new ArrayList<>();
                for (Map.Entry<TopicPartition,String> e : tr.entrySet()) xs.add("X " + e.getKey().topic() + ":" + e.getKey().partition() + " " + e.getValue());
                Collections.sort(xs); for (String x : xs) System.out.println(x);
                System.out.println("DONE");
            }
        }
    }
}
