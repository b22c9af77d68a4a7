package main

// The clients: each a goroutine with one Redis connection at a time,
// doing GET, SET, INCR and DEL on a small set of keys and recording every
// operation with its call and return times.

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
)

// recorder collects the operations of every client.
type recorder struct {
	start    time.Time
	mu       sync.Mutex
	ops      []porcupine.Operation
	unknown  int // writes of unknown outcome (kept, pending forever)
	failed   int // definite failures (dropped: nothing happened)
	lostRead int // reads without an answer (dropped: no effect)
	errs     map[string]int
	nextID   atomic.Int64
}

func newRecorder() *recorder {
	return &recorder{start: time.Now(), errs: map[string]int{}}
}

func (r *recorder) now() int64 { return int64(time.Since(r.start)) }

func (r *recorder) countErr(msg string) {
	if i := strings.IndexAny(msg, ":("); i > 0 && i < 60 {
		msg = msg[:i]
	} else if len(msg) > 60 {
		msg = msg[:60]
	}
	r.mu.Lock()
	r.errs[msg]++
	r.mu.Unlock()
}

// pending marks an unknown outcome's return time, replaced by "after every
// other event" once the history is complete.
const pending = int64(-1)

func (r *recorder) add(op porcupine.Operation) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	if op.Return == pending {
		r.unknown++
	}
	r.mu.Unlock()
}

// history returns the operations with every pending return set after the
// last event of the run.
func (r *recorder) history() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last int64
	for _, op := range r.ops {
		if op.Return > last {
			last = op.Return
		}
		if op.Call > last {
			last = op.Call
		}
	}
	out := make([]porcupine.Operation, len(r.ops))
	for i, op := range r.ops {
		if op.Return == pending {
			op.Return = last + int64(time.Hour)
		}
		out[i] = op
	}
	return out
}

// definite reports whether an error reply says the command was certainly
// not applied (docs/resp.md: "nothing was sent", the tablet is being
// recovered, no tablet serves the key yet, the table cannot be created,
// the server does not serve the key's tablet).
// Every other error may have been applied.
func definite(msg string) bool {
	for _, p := range []string{
		"TRYAGAIN tablet is being recovered",
		"TRYAGAIN no tablet serves this key yet",
		"TRYAGAIN cannot reach the key's master",
		"TRYAGAIN cannot create the database's table",
		"TRYAGAIN the key's tablet is not served by this server",
	} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

type client struct {
	idx     int
	rec     *recorder
	cl      *cluster
	server  int // index of the server it talks to (next to try)
	conn    *respConn
	id      int // porcupine client id (a new one after an unknown outcome)
	timeout time.Duration
	seq     int
	// pinned: always (re)connects to the same server, whatever happens.
	pinned bool
	stop   <-chan struct{}
	at     string // the server of the current connection
}

func (c *client) connect(deadline time.Time) bool {
	for time.Now().Before(deadline) {
		select {
		case <-c.stop:
			return false
		default:
		}
		s := c.cl.servers[c.server%len(c.cl.servers)]
		if s.running() {
			rc, err := dialRESP(s.respAddr(), 300*time.Millisecond)
			if err == nil {
				// Stay on this server until it fails.
				c.conn = rc
				c.at = s.name
				return true
			}
		}
		if !c.pinned {
			c.server++
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func (c *client) drop() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
	if !c.pinned {
		c.server++
	}
}

// do runs one operation and records it. It returns false if no server
// could be reached before the deadline (nothing recorded).
func (c *client) do(in kvInput, deadline time.Time) bool {
	if c.conn == nil && !c.connect(deadline) {
		return false
	}
	var args []string
	switch in.Kind {
	case opGet:
		args = []string{"GET", in.Key}
	case opSet:
		args = []string{"SET", in.Key, in.Val}
	case opIncr:
		args = []string{"INCR", in.Key}
	case opDel:
		args = []string{"DEL", in.Key}
	}
	at := "via " + c.at
	call := c.rec.now()
	rep, err := c.conn.Do(c.timeout, args...)
	ret := c.rec.now()
	var out kvOutput
	if err == nil {
		switch {
		case in.Kind == opGet && rep.Kind == '$':
			out = kvOutput{Nil: rep.Nil, Val: rep.Str}
		case in.Kind == opSet && rep.Kind == '+' && rep.Str == "OK":
		case (in.Kind == opIncr || in.Kind == opDel) && rep.Kind == ':':
			out = kvOutput{N: rep.Int}
		default:
			err = fmt.Errorf("unexpected reply %c%q to %s", rep.Kind, rep.Str, in.Kind)
		}
	}
	if err != nil {
		var er *errorReply
		if errors.As(err, &er) {
			c.rec.countErr(er.msg)
			if definite(er.msg) {
				c.rec.mu.Lock()
				c.rec.failed++
				c.rec.mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				return true
			}
		} else {
			c.rec.countErr(err.Error())
			c.drop()
		}
		if in.Kind == opGet {
			c.rec.mu.Lock()
			c.rec.lostRead++
			c.rec.mu.Unlock()
			return true
		}
		// May or may not have happened, at any time from now on.
		c.rec.add(porcupine.Operation{ClientId: c.id, Input: in, Call: call,
			Output: kvOutput{Unknown: true}, Return: pending, Metadata: at})
		c.id = int(c.rec.nextID.Add(1)) - 1
		return true
	}
	c.rec.add(porcupine.Operation{ClientId: c.id, Input: in, Call: call, Output: out, Return: ret, Metadata: at})
	return true
}

type workload struct {
	clients int
	// pinned clients, one per server, each always on its server, with a
	// shorter timeout: after a timeout it reconnects to the same server
	// and goes on, so a paused server gets requests sent during its pause
	// (after its tablets moved elsewhere) and answers them when it resumes.
	pinned        int
	pinnedTimeout time.Duration
	keys          int
	maxOps        int // per client
	timeout       time.Duration
	thinkMax      time.Duration
}

func keyName(i int) string { return fmt.Sprintf("linz:k%02d", i) }

// run drives the clients until stop is closed, the deadline passes, or each
// has done maxOps operations.
func (w workload) run(cl *cluster, rec *recorder, stop <-chan struct{}, deadline time.Time) {
	keys := make([]string, w.keys)
	for k := range keys {
		keys[k] = keyName(k)
	}
	var wg sync.WaitGroup
	for i := 0; i < w.clients+w.pinned; i++ {
		c := &client{idx: i, rec: rec, cl: cl, server: i, timeout: w.timeout, stop: stop,
			id: int(rec.nextID.Add(1)) - 1}
		if i >= w.clients {
			c.pinned = true
			c.server = i - w.clients
			c.timeout = w.pinnedTimeout
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.loop(keys, w.maxOps, deadline, w.thinkMax)
		}()
	}
	wg.Wait()
}

// focus runs n more clients pinned to one server, on the given keys only,
// until the deadline (or stop); their operations join the same history.
// Their index (for unique SET values) starts at first.
func (w workload) focus(cl *cluster, rec *recorder, server int, keys []string, n, first int, stop <-chan struct{}, deadline time.Time) {
	var wg sync.WaitGroup
	for j := 0; j < n; j++ {
		c := &client{idx: first + j, rec: rec, cl: cl, server: server, timeout: w.pinnedTimeout, stop: stop,
			pinned: true, id: int(rec.nextID.Add(1)) - 1}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.loop(keys, w.maxOps, deadline, w.thinkMax)
		}()
	}
	wg.Wait()
}

// loop does random operations on keys: 45% GET, 30% SET of a value unique
// to this client and operation, 15% INCR, 10% DEL.
func (c *client) loop(keys []string, maxOps int, deadline time.Time, think time.Duration) {
	rng := rand.New(rand.NewSource(time.Now().UnixNano() + int64(c.idx)*7919))
	defer func() {
		if c.conn != nil {
			c.conn.Close()
		}
	}()
	for n := 0; n < maxOps && time.Now().Before(deadline); n++ {
		select {
		case <-c.stop:
			return
		default:
		}
		in := kvInput{Key: keys[rng.Intn(len(keys))]}
		switch p := rng.Intn(100); {
		case p < 45:
			in.Kind = opGet
		case p < 75:
			in.Kind = opSet
			c.seq++
			in.Val = fmt.Sprintf("%d", int64(c.idx+1)*1_000_000_000+int64(c.seq)*1000)
		case p < 90:
			in.Kind = opIncr
		default:
			in.Kind = opDel
		}
		if !c.do(in, deadline) {
			return
		}
		if think > 0 {
			time.Sleep(time.Duration(rng.Int63n(int64(think))))
		}
	}
}

// pipelinedReader sends a GET of one of keys every interval on one
// connection to server, without waiting for the replies (pipelining), and
// records each GET when its reply arrives (replies come in request order).
// While the server is stopped the GETs queue up in its socket; when it
// resumes it answers them all, each checked against its own call time.
// Each GET gets a client id of its own (they overlap). It stops at the
// deadline, on stop, after maxOps GETs, or when the connection fails
// (GETs without a reply are dropped: a read has no effect).
func pipelinedReader(cl *cluster, rec *recorder, server int, keys []string, interval time.Duration, maxOps int,
	stop <-chan struct{}, deadline time.Time) {
	s := cl.servers[server]
	rc, err := dialRESP(s.respAddr(), 300*time.Millisecond)
	if err != nil {
		return
	}
	defer rc.Close()
	type sent struct {
		key  string
		call int64
	}
	inflight := make(chan sent, maxOps)
	done := make(chan struct{})
	_ = rc.c.SetReadDeadline(deadline.Add(10 * time.Second))
	go func() {
		defer close(done)
		for p := range inflight {
			rep, err := readReply(rc.r, 0)
			ret := rec.now()
			if err != nil {
				rec.countErr(err.Error())
				rc.Close()
				return
			}
			if rep.Kind == '-' {
				rec.countErr(rep.Str)
				rec.mu.Lock()
				rec.lostRead++
				rec.mu.Unlock()
				continue
			}
			if rep.Kind != '$' {
				rec.countErr(fmt.Sprintf("unexpected reply %c to GET", rep.Kind))
				continue
			}
			rec.add(porcupine.Operation{ClientId: int(rec.nextID.Add(1)) - 1,
				Input: kvInput{Kind: opGet, Key: p.key}, Call: p.call,
				Output: kvOutput{Nil: rep.Nil, Val: rep.Str}, Return: ret, Metadata: "pipelined via " + s.name})
		}
	}()
	rng := rand.New(rand.NewSource(time.Now().UnixNano() + int64(server)))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	defer func() {
		// The replies still due get 2 s more.
		_ = rc.c.SetReadDeadline(time.Now().Add(2 * time.Second))
		close(inflight)
		<-done
	}()
	for n := 0; n < maxOps && time.Now().Before(deadline); n++ {
		key := keys[rng.Intn(len(keys))]
		cmd := fmt.Sprintf("*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(key), key)
		_ = rc.c.SetWriteDeadline(time.Now().Add(time.Second))
		call := rec.now()
		if _, err := rc.c.Write([]byte(cmd)); err != nil {
			return
		}
		inflight <- sent{key, call}
		select {
		case <-stop:
			return
		case <-done:
			return
		case <-tick.C:
		}
	}
}
