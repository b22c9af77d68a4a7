// Command rediscluster drives a Shoal cluster in Redis Cluster mode with
// go-redis's ClusterClient, the way an application would: it reads the
// slot map from the seed address, then sends every key to its master.
// It checks every answer and exits non-zero on the first wrong one. The
// caller (scripts/cluster-clients) checks that no server forwarded a
// request: the client must have found each key's master itself.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "go-redis ClusterClient: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	seed := flag.String("seed", "127.0.0.1:6380", "address of any server's Redis port")
	keys := flag.Int("keys", 500, "keys to write and read")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{*seed}, ReadTimeout: 10 * time.Second})
	defer rc.Close()

	slots, err := rc.ClusterSlots(ctx).Result()
	if err != nil {
		fail("CLUSTER SLOTS: %v", err)
	}
	masters := map[string]bool{}
	covered := 0
	for _, s := range slots {
		masters[s.Nodes[0].Addr] = true
		covered += s.End - s.Start + 1
	}
	if covered != 16384 || len(masters) < 2 {
		fail("slot map covers %d slots over %d masters", covered, len(masters))
	}
	before := dbsize(ctx, rc)
	for i := 0; i < *keys; i++ {
		if err := rc.Set(ctx, fmt.Sprintf("go:%d", i), strconv.Itoa(i), 0).Err(); err != nil {
			fail("SET go:%d: %v", i, err)
		}
	}
	for i := 0; i < *keys; i++ {
		v, err := rc.Get(ctx, fmt.Sprintf("go:%d", i)).Result()
		if err != nil || v != strconv.Itoa(i) {
			fail("GET go:%d = %q, %v", i, v, err)
		}
	}
	// A pipeline over many slots: go-redis splits it per master.
	cmds, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < 100; i++ {
			p.Incr(ctx, fmt.Sprintf("go:ctr:%d", i))
		}
		return nil
	})
	if err != nil {
		fail("pipeline: %v", err)
	}
	for i, c := range cmds {
		if n, err := c.(*redis.IntCmd).Result(); err != nil || n != 1 {
			fail("pipelined INCR %d = %d, %v", i, n, err)
		}
	}
	// A transaction on one slot (hash tag): MULTI/EXEC on its master.
	_, err = rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "{acct:1}:balance", "100", 0)
		p.IncrBy(ctx, "{acct:1}:balance", 5)
		p.Set(ctx, "{acct:1}:owner", "ann", time.Minute)
		return nil
	})
	if err != nil {
		fail("TxPipelined: %v", err)
	}
	if v, err := rc.Get(ctx, "{acct:1}:balance").Result(); err != nil || v != "105" {
		fail("balance after the transaction = %q, %v", v, err)
	}
	if ttl, err := rc.TTL(ctx, "{acct:1}:owner").Result(); err != nil || ttl <= 0 || ttl > time.Minute {
		fail("TTL = %v, %v", ttl, err)
	}
	// Keys of several slots in one command: CROSSSLOT, as Redis Cluster.
	if err := rc.Do(ctx, "MSET", "go:a", "1", "go:b", "2").Err(); err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT") {
		fail("MSET across slots answered %v", err)
	}
	total := dbsize(ctx, rc) - before
	if total != int64(*keys)+100+2 {
		fail("DBSIZE over the masters grew by %d (want %d)", total, *keys+102)
	}
	fmt.Printf("go-redis ClusterClient: %d keys over %d masters, %d new keys in the masters' DBSIZE\n", *keys, len(masters), total)
}

// dbsize is the sum of every master's DBSIZE: each counts only its own
// keys, as in Redis Cluster (ForEachMaster asks them at once).
func dbsize(ctx context.Context, rc *redis.ClusterClient) int64 {
	var sum atomic.Int64
	err := rc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		n, err := c.DBSize(ctx).Result()
		sum.Add(n)
		return err
	})
	if err != nil {
		fail("DBSIZE: %v", err)
	}
	return sum.Load()
}
