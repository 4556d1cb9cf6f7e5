package io.github.kdelay;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Assumptions;

/**
 * The integration tests' broker and relay: the environment they need, the
 * relay binary's `topic create` and `run`, and waits on the broker.
 */
final class TestRelay {
  private TestRelay() {}

  /** KDELAY_TEST_BROKERS and KDELAY_BIN; aborts the test without them, fails under CI=true. */
  record Env(String brokers, String bin) {}

  static Env env() {
    String brokers = System.getenv("KDELAY_TEST_BROKERS");
    String bin = System.getenv("KDELAY_BIN");
    if (brokers == null || brokers.isBlank() || bin == null || bin.isBlank()) {
      String why = "KDELAY_TEST_BROKERS and KDELAY_BIN must be set (broker: .ci/kafka.sh start; relay: go build -o kdelay ./cmd/kdelay)";
      if ("true".equals(System.getenv("CI"))) {
        fail("CI=true but the integration test cannot run: " + why);
      }
      Assumptions.abort(why);
    }
    return new Env(brokers, bin);
  }

  /** The relay settings of a test: its own delay topic and group. */
  static Map<String, String> settings(String brokers, String delayTopic, String group, String levels, int k) {
    Map<String, String> env = new HashMap<>();
    env.put("KDELAY_BROKERS", brokers);
    env.put("KDELAY_TOPIC", delayTopic);
    env.put("KDELAY_GROUP", group);
    env.put("KDELAY_LEVELS", levels);
    env.put("KDELAY_PARTITIONS_PER_LEVEL", Integer.toString(k));
    return env;
  }

  /** Runs `kdelay args...` to its end; fails on a non-zero exit. */
  static void run(String bin, Map<String, String> env, String... args) throws Exception {
    List<String> cmd = new ArrayList<>();
    cmd.add(bin);
    cmd.addAll(List.of(args));
    ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
    pb.environment().putAll(env);
    Process p = pb.start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) {
      fail("kdelay " + String.join(" ", args) + " failed:\n" + out);
    }
  }

  /** Starts `kdelay run` with its data and log under dir; returns once /readyz answers 200. */
  static Process start(String bin, Map<String, String> env, Path dir) throws Exception {
    int port;
    try (ServerSocket s = new ServerSocket(0)) {
      port = s.getLocalPort();
    }
    Path log = dir.resolve("relay.log");
    ProcessBuilder pb = new ProcessBuilder(bin, "run").redirectErrorStream(true).redirectOutput(log.toFile());
    pb.environment().putAll(env);
    pb.environment().put("KDELAY_DATA_DIR", dir.resolve("relay-data").toString());
    pb.environment().put("KDELAY_HTTP_ADDR", "127.0.0.1:" + port);
    pb.environment().put("KDELAY_FETCH_MAX_WAIT", "50ms");
    Process p = pb.start();
    HttpClient http = HttpClient.newHttpClient();
    HttpRequest ready = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/readyz")).timeout(Duration.ofSeconds(2)).build();
    Instant deadline = Instant.now().plusSeconds(90);
    while (true) {
      if (!p.isAlive()) fail("relay exited with " + p.exitValue() + ":\n" + Files.readString(log));
      try {
        if (http.send(ready, HttpResponse.BodyHandlers.discarding()).statusCode() == 200) return p;
      } catch (IOException notYet) {
        // not listening yet
      }
      if (Instant.now().isAfter(deadline)) {
        p.destroyForcibly();
        fail("relay not ready within 90 s:\n" + Files.readString(log));
      }
      Thread.sleep(100); // polling /readyz: the relay offers no other signal
    }
  }

  /** SIGTERM (the relay commits and leaves the group); fails when it does not stop within 40 s. */
  static void stop(Process relay) throws InterruptedException {
    relay.destroy();
    if (!relay.waitFor(40, TimeUnit.SECONDS)) {
      relay.destroyForcibly();
      fail("relay did not stop within 40 s of SIGTERM");
    }
  }

  /**
   * Waits until the broker describes every topic with its partition count:
   * `kdelay topic create` returns before a new topic shows in every metadata
   * response, and `kdelay run` refuses to start on a missing topic.
   */
  static void awaitTopics(Admin admin, Map<String, Integer> want) throws Exception {
    long deadline = System.currentTimeMillis() + 30_000;
    while (true) {
      try {
        var d = admin.describeTopics(want.keySet()).allTopicNames().get(10, TimeUnit.SECONDS);
        if (want.entrySet().stream().allMatch(e -> d.get(e.getKey()).partitions().size() == e.getValue())) {
          return;
        }
      } catch (ExecutionException notYet) {
        // UnknownTopicOrPartitionException until the metadata has caught up
      }
      if (System.currentTimeMillis() > deadline) fail("topics not in metadata after 30 s: " + want);
      Thread.sleep(100); // polling metadata: no event to wait on
    }
  }

  /** Waits until group has committed every partition of topic to its end offset. */
  static void awaitCommitted(Admin admin, String group, String topic, long deadline) throws Exception {
    while (true) {
      Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group)
          .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
      Map<TopicPartition, OffsetSpec> q = new HashMap<>();
      for (TopicPartition tp : admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS).get(topic)
          .partitions().stream().map(p -> new TopicPartition(topic, p.partition())).toList()) {
        q.put(tp, OffsetSpec.latest());
      }
      var ends = admin.listOffsets(q).all().get(30, TimeUnit.SECONDS);
      boolean done = ends.entrySet().stream().allMatch(e -> e.getValue().offset() == 0
          || (committed.get(e.getKey()) != null && committed.get(e.getKey()).offset() >= e.getValue().offset()));
      if (done) return;
      if (System.currentTimeMillis() > deadline) fail("relay did not commit the delay topic to its end: committed " + committed + ", end " + ends);
      Thread.sleep(200); // polling the broker's committed offsets: no event to wait on
    }
  }
}
