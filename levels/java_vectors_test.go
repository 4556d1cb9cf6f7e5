package levels

import (
	"testing"
	"time"
)

// javaVectors are outputs of Kafka's Java client (kafka-clients 4.1.0,
// org.apache.kafka.common.utils.Utils): murmur2 of the key's bytes, and
// toPositive(murmur2(key)) % n for n = 2, 3, 4, 7, 16, the partition its
// default partitioner picks for a keyed record among n partitions. Printed
// by testdata/JavaVectors.java (how to run it is at its top).
var javaVectors = []struct {
	key    string
	murmur int32
	mod    [5]int32 // % 2, 3, 4, 7, 16
}{
	{"", 275646681, [5]int32{1, 0, 1, 2, 9}},
	{"a", -1563381124, [5]int32{0, 1, 0, 5, 12}},
	{"ab", 316155434, [5]int32{0, 2, 2, 0, 10}},
	{"abc", 479470107, [5]int32{1, 0, 3, 4, 11}},
	{"abcd", -1323649548, [5]int32{0, 2, 0, 5, 4}},
	{"abcde", 461995741, [5]int32{1, 1, 1, 4, 13}},
	{"order-17", 1568318961, [5]int32{1, 0, 1, 6, 1}},
	{"order-18", 1639752299, [5]int32{1, 2, 3, 3, 11}},
	{"user:42", -1493546323, [5]int32{1, 1, 1, 6, 13}},
	{"0", 971027396, [5]int32{0, 2, 0, 3, 4}},
	{"1", -1993445489, [5]int32{1, 0, 3, 2, 15}},
	{"2", 648968168, [5]int32{0, 2, 0, 2, 8}},
	{"3", -1148165505, [5]int32{1, 2, 3, 5, 15}},
	{"kdelay", 1784803944, [5]int32{0, 0, 0, 0, 8}},
	{"some longer key of 33 bytes .....", 967389678, [5]int32{0, 0, 2, 3, 14}},
	{"été", -2101193575, [5]int32{1, 1, 1, 4, 9}},
	{"日本", -700811021, [5]int32{1, 0, 3, 1, 3}},
	{"\xff", -311467685, [5]int32{1, 0, 3, 5, 11}},
	{"\x80\x00\x00\x00", -65415266, [5]int32{0, 0, 2, 2, 14}},
	{"\x00\x00\x00\x00\x00", 263274959, [5]int32{1, 2, 3, 3, 15}},
	{"\xde\xad\xbe\xef\x01\x02\x03", 571205928, [5]int32{0, 0, 0, 6, 8}},
}

var javaMods = [5]int32{2, 3, 4, 7, 16}

func TestMurmur2JavaVectors(t *testing.T) {
	for _, v := range javaVectors {
		if got := int32(murmur2([]byte(v.key))); got != v.murmur {
			t.Errorf("murmur2(%q) = %d, Java's Utils.murmur2 = %d", v.key, got, v.murmur)
		}
	}
}

// TestPartitionForJavaVectors: inside a level of k partitions, a keyed
// record goes where Kafka's Java default partitioner would put it among k
// partitions, offset by the level's first partition.
func TestPartitionForJavaVectors(t *testing.T) {
	durs := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
	for i, k := range javaMods {
		tab, err := New(durs, int(k))
		if err != nil {
			t.Fatal(err)
		}
		for level := 1; level <= len(durs); level++ {
			from, _ := tab.Range(level)
			for _, v := range javaVectors {
				if got, want := tab.PartitionFor(level, []byte(v.key)), from+v.mod[i]; got != want {
					t.Errorf("k=%d: PartitionFor(%d, %q) = %d, want %d (level's first %d + Java's %d)", k, level, v.key, got, want, from, v.mod[i])
				}
			}
		}
	}
}
