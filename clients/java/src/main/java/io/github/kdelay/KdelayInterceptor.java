package io.github.kdelay;

import java.lang.System.Logger.Level;
import java.util.Map;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Utils;

/**
 * A {@link ProducerInterceptor} that places every record sent to the delay
 * topic with a {@code kdelay-target} header into the partition of its level,
 * so existing {@code KafkaProducer} or Spring {@code KafkaTemplate} code only
 * sets the kdelay headers. (An interceptor sees headers; a partitioner does
 * not.)
 *
 * <pre>{@code
 * props.put(ProducerConfig.INTERCEPTOR_CLASSES_CONFIG, KdelayInterceptor.class.getName());
 * props.put(KdelayInterceptor.TOPIC_CONFIG, "delay-topic");           // default delay-topic
 * props.put(KdelayInterceptor.LEVELS_CONFIG, "1s 5s 10s ... 2h");      // default: the 18 levels
 * props.put(KdelayInterceptor.PARTITIONS_PER_LEVEL_CONFIG, "1");       // default 1
 * }</pre>
 *
 * <p>The level comes from the headers exactly as the relay reads them
 * ({@link KdelayLevels#parseHeaders}), counted from the record timestamp; a
 * record without one gets the current time as its timestamp, so the level
 * and the relay agree. A partition already set on the record is kept when
 * it lies in the right level, replaced otherwise. Inside a level with
 * several partitions (k &gt; 1) the serialized key decides: byte[] keys as
 * they are, other keys through an instance of the producer's {@code
 * key.serializer}. Records to other topics, without {@code kdelay-target},
 * or whose headers break the contract pass unchanged (the relay
 * dead-letters the latter with the reason this interceptor logs).
 */
public class KdelayInterceptor<K, V> implements ProducerInterceptor<K, V> {
  /** The delay topic (default {@code delay-topic}), as the relay's KDELAY_TOPIC. */
  public static final String TOPIC_CONFIG = "kdelay.topic";
  /** The level list (default {@link KdelayLevels#DEFAULT_SPEC}), as KDELAY_LEVELS. */
  public static final String LEVELS_CONFIG = "kdelay.levels";
  /** Partitions per level (default 1), as KDELAY_PARTITIONS_PER_LEVEL. */
  public static final String PARTITIONS_PER_LEVEL_CONFIG = "kdelay.partitions.per.level";

  private static final System.Logger LOG = System.getLogger(KdelayInterceptor.class.getName());

  private String topic = "delay-topic";
  private KdelayLevels levels = KdelayLevels.defaults();
  private Serializer<Object> keySerializer;

  @Override
  public void configure(Map<String, ?> configs) {
    Object t = configs.get(TOPIC_CONFIG);
    if (t != null) {
      topic = t.toString();
    }
    Object spec = configs.get(LEVELS_CONFIG);
    Object k = configs.get(PARTITIONS_PER_LEVEL_CONFIG);
    int perLevel;
    try {
      perLevel = k == null ? 1 : Integer.parseInt(k.toString().trim());
    } catch (NumberFormatException e) {
      throw new ConfigException(PARTITIONS_PER_LEVEL_CONFIG, k, "not an integer");
    }
    try {
      levels = KdelayLevels.parse(spec == null ? KdelayLevels.DEFAULT_SPEC : spec.toString(), perLevel);
    } catch (IllegalArgumentException e) {
      throw new ConfigException(LEVELS_CONFIG, spec, e.getMessage());
    }
    if (levels.perLevel() > 1) {
      keySerializer = keySerializer(configs);
    }
  }

  @SuppressWarnings("unchecked")
  private static Serializer<Object> keySerializer(Map<String, ?> configs) {
    Object ks = configs.get(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG);
    if (ks == null) {
      return null;
    }
    try {
      Serializer<Object> s;
      if (ks instanceof Serializer<?> inst) {
        s = (Serializer<Object>) Utils.newInstance(inst.getClass());
      } else if (ks instanceof Class<?> c) {
        s = (Serializer<Object>) Utils.newInstance(c);
      } else {
        s = Utils.newInstance(ks.toString().trim(), Serializer.class);
      }
      s.configure(configs, true);
      return s;
    } catch (ClassNotFoundException | KafkaException e) {
      throw new ConfigException(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ks, "kdelay interceptor cannot instantiate it: " + e);
    }
  }

  /** The delay topic this interceptor places records in. */
  public String topic() {
    return topic;
  }

  /** The level table this interceptor places records by. */
  public KdelayLevels levels() {
    return levels;
  }

  @Override
  public ProducerRecord<K, V> onSend(ProducerRecord<K, V> record) {
    if (!topic.equals(record.topic()) || record.headers().lastHeader(KdelayHeaders.TARGET) == null) {
      return record;
    }
    long ts = record.timestamp() != null ? record.timestamp() : System.currentTimeMillis();
    Schedule s;
    try {
      s = levels.parseHeaders(record.headers(), ts);
    } catch (ContractException e) {
      LOG.log(Level.WARNING, "kdelay: record to {0} breaks the producer contract and will be dead-lettered ({1}): {2}",
          topic, e.reason(), e.getMessage());
      return record;
    }
    Integer p = record.partition();
    if (p == null || levels.levelOf(p) != s.level()) {
      p = levels.partitionFor(s.level(), keyBytes(record));
    }
    return new ProducerRecord<>(record.topic(), p, ts, record.key(), record.value(), record.headers());
  }

  private byte[] keyBytes(ProducerRecord<K, V> record) {
    Object key = record.key();
    if (key == null || levels.perLevel() == 1) {
      return null;
    }
    if (key instanceof byte[] b) {
      return b;
    }
    if (keySerializer != null) {
      try {
        return keySerializer.serialize(record.topic(), record.headers(), key);
      } catch (RuntimeException e) {
        LOG.log(Level.WARNING, "kdelay: cannot serialize the key for its level partition; any partition of the level: {0}", e.toString());
        return null;
      }
    }
    return null;
  }

  @Override
  public void onAcknowledgement(RecordMetadata metadata, Exception exception) {}

  @Override
  public void close() {
    if (keySerializer != null) {
      keySerializer.close();
    }
  }
}
