// Command linearizability checks that a real Shoal cluster's single-key
// operations are linearizable under real faults.
//
// For each scenario it starts a coordinator and N servers (their own
// processes, so it knows every PID), runs concurrent Redis clients doing
// GET, SET, INCR and DEL on a few keys while it injects the scenario's
// fault, heals it, reads every key once more, and checks the whole history
// with Porcupine (one partition per key) and the acknowledged writes with a
// ledger. See docs/linearizability.md.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/anishathalye/porcupine"
)

type config struct {
	exe          string
	out          string
	servers      int
	replicas     int
	memory       string
	logLevel     string
	work         workload
	runFor       time.Duration
	faultAt      time.Duration
	pause        time.Duration
	checkTimeout time.Duration
	keep         bool
	syncOpen     bool
	focus        int
	readers      int
	readInterval time.Duration
	rounds       int
}

type result struct {
	name      string
	ops       int
	reads     int
	writes    int
	unknown   int
	failed    int
	lostReads int
	faults    []string // events, with their times
	injected  int
	verdict   string
	illegal   []string
	losses    []string
	acked     int
	viz       []string
	checked   string // how long the check took
	note      string // how the verdict was reached, if not the plain way
	sc        string // symmetric caching's counters, summed over the servers
	errs      map[string]int
	err       error
}

func (r *result) bad() bool {
	return r.err != nil || r.verdict != "legal" || len(r.losses) > 0
}

// live tracks running clusters so that a signal stops them.
var live sync.Map

func main() {
	var cfg config
	var scenarios string
	flag.StringVar(&cfg.exe, "shoal", "target/debug/shoal", "the shoal binary")
	flag.StringVar(&scenarios, "scenarios", "kill,restart", "comma-separated scenarios: kill, zombie, restart, partition, partition-backups, partition-coordinator, partition-clients, sc-strong, sc-kill, sc-eventual, sc-partition, sc-zombie (or all: "+strings.Join(allScenarios, ",")+")")
	flag.StringVar(&cfg.out, "out", "", "directory for cluster data, logs and visualisations (default: a new one under the temp dir)")
	flag.IntVar(&cfg.servers, "servers", 5, "servers in the cluster")
	flag.IntVar(&cfg.replicas, "replicas", 2, "replicas of every segment (R)")
	flag.StringVar(&cfg.memory, "memory", "256MiB", "memory per server")
	flag.StringVar(&cfg.logLevel, "log-level", "info", "log level of the shoal processes")
	flag.IntVar(&cfg.work.clients, "clients", 10, "concurrent clients")
	flag.IntVar(&cfg.work.pinned, "pinned", 5, "more clients, each pinned to one server (server i mod servers)")
	flag.DurationVar(&cfg.work.pinnedTimeout, "pinned-timeout", 1200*time.Millisecond, "a pinned client's wait for one reply")
	flag.IntVar(&cfg.work.keys, "keys", 12, "keys")
	flag.IntVar(&cfg.work.maxOps, "max-ops", 3000, "most operations per client per scenario")
	flag.DurationVar(&cfg.work.timeout, "op-timeout", 5*time.Second, "a client's wait for one reply (longer than -pause, so that connections survive a pause)")
	flag.DurationVar(&cfg.work.thinkMax, "think", 2*time.Millisecond, "most a client sleeps between operations")
	flag.DurationVar(&cfg.runFor, "run", 0, "how long the clients run in each scenario (default: until 2 s after the last round has settled)")
	flag.DurationVar(&cfg.faultAt, "fault-at", 3*time.Second, "when the fault is injected")
	flag.DurationVar(&cfg.pause, "pause", 3*time.Second, "how long a fault lasts (SIGSTOP, partition, a killed server staying down)")
	flag.DurationVar(&cfg.checkTimeout, "check-timeout", 60*time.Second, "the most Porcupine may search per scenario")
	flag.BoolVar(&cfg.syncOpen, "sync-open", false, "servers run with --sync-open (backups sync before acknowledging: slower rounds, so a longer window for reads of writes not yet durable)")
	flag.IntVar(&cfg.rounds, "rounds", 2, "faults per scenario (kill and zombie: each on the master of the most keys at the time; restart: whole-cluster restarts)")
	flag.IntVar(&cfg.focus, "focus", 6, "zombie, partition: more clients, each on a connection to the victim, working on its keys during each fault")
	flag.IntVar(&cfg.readers, "readers", 4, "zombie, partition: pipelined readers of the victim's keys during each fault, each on a connection to the victim, sending a GET every -read-interval without waiting for replies")
	flag.DurationVar(&cfg.readInterval, "read-interval", 50*time.Millisecond, "how often a pipelined reader sends a GET")
	var searchOnePath string
	flag.StringVar(&searchOnePath, "search-one", "", "(internal) check the one key's operations in this file within -check-timeout; exit 0 legal, 10 illegal, 11 undecided")
	flag.Int64Var(&searchMemory, "search-memory", searchMemory, "the most resident memory (bytes) one key's search may take before it is stopped and the key left undecided")
	var recheck string
	flag.StringVar(&recheck, "recheck", "", "check a history written by an earlier run (<out>/<scenario>.history.jsonl) again, key by key, within -check-timeout per key, and exit")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the data, logs and histories (<out>/<scenario>.history.jsonl) of scenarios that passed")
	flag.Parse()

	if searchOnePath != "" {
		os.Exit(searchOne(searchOnePath, cfg.checkTimeout))
	}
	if recheck != "" {
		os.Exit(recheckFile(recheck, cfg.checkTimeout))
	}
	if cfg.runFor == 0 {
		cfg.runFor = cfg.faultAt + time.Duration(cfg.rounds)*(cfg.pause+settle) + 2*time.Second
	}
	exe, err := filepath.Abs(cfg.exe)
	if err == nil {
		_, err = os.Stat(exe)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "linz: the shoal binary: %v (build it with cargo build -p shoal, or give -shoal)\n", err)
		os.Exit(2)
	}
	cfg.exe = exe
	if cfg.out == "" {
		if cfg.out, err = os.MkdirTemp("", "shoal-linz-"); err != nil {
			fmt.Fprintln(os.Stderr, "linz:", err)
			os.Exit(2)
		}
	}
	if cfg.out, err = filepath.Abs(cfg.out); err != nil {
		fmt.Fprintln(os.Stderr, "linz:", err)
		os.Exit(2)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "linz: %v: stopping the clusters\n", s)
		live.Range(func(k, _ any) bool { k.(*cluster).stop(); return true })
		cleanupNetns()
		os.Exit(130)
	}()

	names := strings.Split(scenarios, ",")
	if scenarios == "all" {
		names = allScenarios
	}
	var results []*result
	for _, name := range names {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if _, ok := scenarioFuncs[name]; !ok {
			fmt.Fprintf(os.Stderr, "linz: unknown scenario %q (%s)\n", name, scenarioNames())
			os.Exit(2)
		}
		fmt.Printf("== scenario %s\n", name)
		r := runScenario(cfg, name)
		report(r)
		results = append(results, r)
	}
	fmt.Println("== summary")
	failed := 0
	for _, r := range results {
		status := "ok"
		if r.bad() {
			status = "FAIL"
			failed++
		}
		fmt.Printf("%-21s %-4s ops=%d faults=%d verdict=%s acked-writes=%d lost=%d\n",
			r.name, status, r.ops, r.injected, r.verdict, r.acked, len(r.losses))
	}
	fmt.Printf("linearizability: %d passed, %d failed\n", len(results)-failed, failed)
	if failed > 0 {
		fmt.Printf("data and logs under %s\n", cfg.out)
		os.Exit(1)
	}
	if !cfg.keep {
		os.RemoveAll(cfg.out)
	}
}

func report(r *result) {
	fmt.Printf("  operations: %d recorded (%d reads, %d writes, %d writes of unknown outcome); %d definite failures and %d unanswered reads dropped\n",
		r.ops, r.reads, r.writes, r.unknown, r.failed, r.lostReads)
	fmt.Printf("  faults injected: %d\n", r.injected)
	for _, f := range r.faults {
		fmt.Printf("  event: %s\n", f)
	}
	if len(r.errs) > 0 {
		keys := make([]string, 0, len(r.errs))
		for k := range r.errs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Printf("  client errors: %5d x %s\n", r.errs[k], k)
		}
	}
	if r.err != nil {
		fmt.Printf("  error: %v\n", r.err)
	}
	if r.sc != "" {
		fmt.Printf("  symmetric caching: %s\n", r.sc)
	}
	fmt.Printf("  ledger: %d acknowledged writes, %d lost\n", r.acked, len(r.losses))
	for _, l := range r.losses {
		fmt.Printf("    LOST %s\n", l)
	}
	fmt.Printf("  verdict: %s\n", r.verdict)
	if r.note != "" {
		fmt.Printf("    %s\n", r.note)
	}
	for _, k := range r.illegal {
		fmt.Printf("    not linearizable: key %s\n", k)
	}
	if r.checked != "" {
		fmt.Printf("  check: %s\n", r.checked)
	}
	for _, v := range r.viz {
		fmt.Printf("  visualisation: %s\n", v)
	}
}

// scenarioFuncs inject each scenario's fault at faultAt and heal it; they
// return when the fault has healed.
var scenarioFuncs = map[string]func(s *scenario){
	"kill":                  killScenario,
	"zombie":                zombieScenario,
	"restart":               restartScenario,
	"partition":             partitionScenario("partition"),
	"partition-backups":     partitionScenario("partition-backups"),
	"partition-coordinator": partitionScenario("partition-coordinator"),
	"partition-clients":     partitionScenario("partition-clients"),
	"sc-strong":             quietScenario,
	"sc-kill":               killScenario,
	"sc-eventual":           quietScenario,
	"sc-partition":          partitionScenario("sc-partition"),
	"sc-zombie":             zombieScenario,
}

// scServerArgs are the server flags of the symmetric-caching scenarios
// (docs/symmetric-caching.md): every key may be hot (the hot set holds up
// to 64 keys), and rounds of 150 ms move keys in and out of it all the
// time, so epochs change under load. sc-strong runs no other fault;
// sc-kill SIGKILLs the master of the most keys (a member of the group and
// the home of some hot keys) and starts it again, changing the group's
// membership twice per round. sc-eventual is checked for convergence only
// (eventual mode is not linearizable): see scEventual.
var scServerArgs = map[string][]string{
	"sc-strong":    {"--sc", "on", "--sc-consistency", "strong", "--sc-epoch-ms", "150", "--sc-cache-keys", "64"},
	"sc-kill":      {"--sc", "on", "--sc-consistency", "strong", "--sc-epoch-ms", "150", "--sc-cache-keys", "64"},
	"sc-eventual":  {"--sc", "on", "--sc-consistency", "eventual", "--sc-epoch-ms", "150", "--sc-cache-keys", "64"},
	"sc-partition": {"--sc", "on", "--sc-consistency", "strong", "--sc-epoch-ms", "150", "--sc-cache-keys", "64"},
	"sc-zombie":    {"--sc", "on", "--sc-consistency", "strong", "--sc-epoch-ms", "150", "--sc-cache-keys", "64"},
}

// quietScenario injects no fault: the load runs for -run.
func quietScenario(s *scenario) {}

// allScenarios is what -scenarios all runs (scripts/check's default).
var allScenarios = []string{"kill", "zombie", "restart", "partition",
	"partition-backups", "partition-coordinator", "partition-clients", "sc-strong", "sc-kill", "sc-eventual", "sc-partition", "sc-zombie"}

func scenarioNames() string {
	names := make([]string, 0, len(scenarioFuncs))
	for n := range scenarioFuncs {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

type scenario struct {
	stop <-chan struct{}
	cfg  config
	cl   *cluster
	rec  *recorder
	// fault logs an event of the scenario, with its time.
	fault func(format string, args ...any)
	// injected counts the faults injected.
	injected *int
}

// inject logs a fault being injected, and counts it.
func (s *scenario) inject(format string, args ...any) {
	s.fault(format, args...)
	*s.injected++
}

// sleepUntil sleeps until d after the recorder's start.
func (s *scenario) sleepUntil(d time.Duration) {
	time.Sleep(time.Until(s.rec.start.Add(d)))
}

// victim picks the running server that masters the most keys.
func (s *scenario) victim() (int, int) {
	count := map[int]int{}
	for k := 0; k < s.cfg.work.keys; k++ {
		if m := s.cl.masterOf(keyName(k)); m >= 0 {
			count[m]++
		}
	}
	best, n := 0, -1
	for i := range s.cl.servers {
		if count[i] > n {
			best, n = i, count[i]
		}
	}
	return best, n
}

func runScenario(cfg config, name string) *result {
	r := &result{name: name, verdict: "not checked"}
	root := filepath.Join(cfg.out, name)
	os.RemoveAll(root)
	opts := clusterOptions{servers: cfg.servers, replicas: cfg.replicas, memory: cfg.memory, logLevel: cfg.logLevel,
		syncOpen: cfg.syncOpen, serverArgs: scServerArgs[name]}
	var setup func() error
	if _, ok := partitionShapes[name]; ok {
		var err error
		if opts, setup, err = netnsOptions(opts); err != nil {
			r.err = err
			return r
		}
		defer cleanupNetns()
	}
	if setup != nil {
		if err := setup(); err != nil {
			r.err = err
			return r
		}
	}
	cl, err := newCluster(cfg.exe, root, opts)
	if err != nil {
		r.err = err
		return r
	}
	live.Store(cl, true)
	defer func() {
		cl.stop()
		live.Delete(cl)
		if !r.bad() && !cfg.keep {
			os.RemoveAll(root)
		}
	}()
	if err := cl.start(60 * time.Second); err != nil {
		r.err = err
		return r
	}
	// The first write to database 0 creates its table: make it now, and
	// wait until every server knows its tablets (every key has a master).
	if err := createTable(cl, cfg.work.keys); err != nil {
		r.err = err
		return r
	}

	rec := newRecorder()
	var fmu sync.Mutex
	stop := make(chan struct{})
	s := &scenario{stop: stop, cfg: cfg, cl: cl, rec: rec, injected: &r.injected, fault: func(format string, args ...any) {
		msg := fmt.Sprintf("t=%5.2fs ", time.Since(rec.start).Seconds()) + fmt.Sprintf(format, args...)
		fmu.Lock()
		r.faults = append(r.faults, msg)
		fmu.Unlock()
	}}
	done := make(chan struct{})
	go func() {
		cfg.work.run(cl, rec, stop, rec.start.Add(cfg.runFor+30*time.Second))
		close(done)
	}()
	scenarioFuncs[name](s)
	s.sleepUntil(cfg.runFor)
	close(stop)
	<-done

	// Every fault has healed: wait for the cluster, then read every key
	// through every running server (recorded in the history too).
	if err := cl.waitReady(60 * time.Second); err != nil {
		r.err = fmt.Errorf("after the faults healed: %w", err)
	}
	final, err := finalReads(cl, rec, cfg.work.keys)
	if err != nil && r.err == nil {
		r.err = err
	}

	if _, ok := scServerArgs[name]; ok {
		// The caches must have served reads, or the scenario proves nothing.
		hits, stats := scStats(cl)
		r.sc = stats
		if hits == 0 && r.err == nil {
			r.err = fmt.Errorf("symmetric caching served no read from a copy (%s)", stats)
		}
	}
	history := rec.history()
	r.ops = len(history)
	for _, op := range history {
		in := op.Input.(kvInput)
		if in.Kind == opGet {
			r.reads++
		} else {
			r.writes++
			if !op.Output.(kvOutput).Unknown {
				r.acked++
			}
		}
	}
	r.unknown, r.failed, r.lostReads, r.errs = rec.unknown, rec.failed, rec.lostRead, rec.errs
	r.losses = ledgerLosses(history, final)

	if name == "sc-eventual" {
		// Eventual consistency promises convergence, not linearizability.
		r.verdict, r.illegal = scConvergence(cl, cfg.work.keys)
		r.checked = "convergence of every key over every server"
		return r
	}
	checkStart := time.Now()
	checks := checkKeys(history, cfg.checkTimeout)
	r.checked = fmt.Sprintf("%s, %.1f s of wall time", checkTimes(checks), time.Since(checkStart).Seconds())
	r.verdict, r.note, r.illegal = verdict(checks)
	if r.verdict != "legal" || cfg.keep {
		if err := dumpHistory(filepath.Join(cfg.out, name+".history.jsonl"), history); err != nil {
			fmt.Fprintf(os.Stderr, "linz: cannot write the history: %v\n", err)
		}
	}
	if r.verdict != "legal" {
		r.viz = visualize(checks, filepath.Join(cfg.out, name))
	}
	return r
}

func createTable(cl *cluster, keys int) error {
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		rc, err := dialRESP(cl.servers[0].respAddr(), time.Second)
		if err == nil {
			_, err = rc.Do(5*time.Second, "SET", "linz:setup", "1")
			rc.Close()
		}
		if err == nil {
			break
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	if last != nil && time.Now().After(deadline) {
		return fmt.Errorf("cannot create database 0's table: %w", last)
	}
	for time.Now().Before(deadline) {
		ok := true
		for k := 0; k < keys && ok; k++ {
			ok = cl.masterOf(keyName(k)) >= 0
		}
		if ok {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the keys have no master after the table was created")
}

// finalReads reads every key through every running server, retrying
// definite failures, and records each read in the history. It returns the
// values read through servers that are up in the map (for the ledger).
func finalReads(cl *cluster, rec *recorder, keys int) (map[string]kvOutput, error) {
	m, err := cl.getMap()
	if err != nil {
		return nil, err
	}
	upResp := map[string]bool{}
	for _, s := range m.Servers {
		if s.State == "up" {
			upResp[s.Resp] = true
		}
	}
	final := map[string]kvOutput{}
	id := int(rec.nextID.Add(1)) - 1
	// At most a minute in all (a key that no up server could read is a
	// ledger failure: "no final read").
	end := time.Now().Add(time.Minute)
	for _, s := range cl.servers {
		if !s.running() {
			continue
		}
		for k := 0; k < keys; k++ {
			key := keyName(k)
			deadline := time.Now().Add(10 * time.Second)
			if deadline.After(end) {
				deadline = end
			}
			for time.Now().Before(deadline) {
				rc, err := dialRESP(s.respAddr(), time.Second)
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				call := rec.now()
				rep, err := rc.Do(5*time.Second, "GET", key)
				ret := rec.now()
				rc.Close()
				if err != nil || rep.Kind != '$' {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				out := kvOutput{Nil: rep.Nil, Val: rep.Str}
				rec.add(porcupine.Operation{ClientId: id, Input: kvInput{Kind: opGet, Key: key}, Call: call, Output: out, Return: ret,
					Metadata: "final read via " + s.name})
				if upResp[s.respAddr()] {
					if _, ok := final[key]; !ok {
						final[key] = out
					}
				}
				break
			}
		}
	}
	return final, nil
}

// dumpHistory writes one JSON object per operation (times in ns since the
// start; an unknown outcome's return is after every other event).
func dumpHistory(path string, history []porcupine.Operation) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, op := range history {
		in, out := op.Input.(kvInput), op.Output.(kvOutput)
		if err := enc.Encode(map[string]any{"client": op.ClientId, "op": in.Kind.String(), "key": in.Key, "arg": in.Val,
			"call": op.Call, "return": op.Return, "unknown": out.Unknown, "nil": out.Nil, "val": out.Val, "n": out.N,
			"via": op.Metadata}); err != nil {
			return err
		}
	}
	return nil
}

// loadHistory reads a history written by dumpHistory.
func loadHistory(path string) ([]porcupine.Operation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var history []porcupine.Operation
	dec := json.NewDecoder(f)
	kinds := map[string]opKind{"GET": opGet, "SET": opSet, "INCR": opIncr, "DEL": opDel}
	for {
		var o struct {
			Client  int    `json:"client"`
			Op      string `json:"op"`
			Key     string `json:"key"`
			Arg     string `json:"arg"`
			Call    int64  `json:"call"`
			Return  int64  `json:"return"`
			Unknown bool   `json:"unknown"`
			Nil     bool   `json:"nil"`
			Val     string `json:"val"`
			N       int64  `json:"n"`
			Via     any    `json:"via"`
		}
		if err := dec.Decode(&o); err != nil {
			if err == io.EOF {
				return history, nil
			}
			return nil, err
		}
		kind, ok := kinds[o.Op]
		if !ok {
			return nil, fmt.Errorf("%s: unknown operation %q", path, o.Op)
		}
		history = append(history, porcupine.Operation{ClientId: o.Client,
			Input:  kvInput{Kind: kind, Key: o.Key, Val: o.Arg},
			Output: kvOutput{Unknown: o.Unknown, Nil: o.Nil, Val: o.Val, N: o.N},
			Call:   o.Call, Return: o.Return, Metadata: o.Via})
	}
}

// recheckFile loads a history written by dumpHistory and checks each key
// on its own: 0 if every key is legal, 1 otherwise.
func recheckFile(path string, timeout time.Duration) int {
	history, err := loadHistory(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "linz:", err)
		return 2
	}
	checks := checkKeys(history, timeout)
	bad := 0
	for _, c := range checks {
		v := map[porcupine.CheckResult]string{porcupine.Ok: "legal", porcupine.Illegal: "illegal", porcupine.Unknown: "undecided (timed out)"}[c.res]
		if c.by != "" {
			v = "legal (by the search with " + c.by + ")"
		}
		fmt.Printf("%s: %d operations, %s (%.1f s)\n", c.key, c.ops, v, c.took.Seconds())
		if c.res == porcupine.Illegal {
			fmt.Println("   " + strings.TrimPrefix(witness(c.part, c.info), "\n"))
		}
		if c.res != porcupine.Ok {
			bad++
		}
	}
	for _, v := range visualize(checks, strings.TrimSuffix(path, ".history.jsonl")) {
		fmt.Printf("  visualisation: %s\n", v)
	}
	if bad > 0 {
		return 1
	}
	return 0
}

// visualize writes Porcupine's visualisation of every key that is not
// legal to <prefix>.<key>.html and returns the paths written.
func visualize(checks []keyCheck, prefix string) []string {
	var paths []string
	for _, c := range checks {
		if c.res == porcupine.Ok {
			continue
		}
		path := prefix + "." + strings.ReplaceAll(c.key, ":", "_") + ".html"
		if err := porcupine.VisualizePath(singleKey, c.info, path); err != nil {
			fmt.Fprintf(os.Stderr, "linz: cannot write the visualisation: %v\n", err)
			continue
		}
		paths = append(paths, path)
	}
	return paths
}

// scConvergence checks eventual mode's promise once writes have stopped:
// every server answers every key with the same value (a member from its
// copy, the home from its store) within 5 s. Verdict "legal" if so.
func scConvergence(cl *cluster, keys int) (string, []string) {
	var diverged []string
	deadline := time.Now().Add(5 * time.Second)
	for {
		diverged = diverged[:0]
		for k := 0; k < keys; k++ {
			key := keyName(k)
			seen := map[string][]string{}
			for _, s := range cl.servers {
				if !s.running() {
					continue
				}
				rep, err := respOnce(s.respAddr(), "GET", key)
				if err != nil || rep.Kind != '$' {
					continue
				}
				v := "(nil)"
				if !rep.Nil {
					v = rep.Str
				}
				seen[v] = append(seen[v], s.name)
			}
			if len(seen) > 1 {
				diverged = append(diverged, fmt.Sprintf("%s: %v", key, seen))
			}
		}
		if len(diverged) == 0 {
			return "legal", nil
		}
		if time.Now().After(deadline) {
			return "diverged", diverged
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// scStats sums symmetric caching's counters (INFO shoal, sc_*) over the
// running servers: the reads served from copies, and a summary line.
func scStats(cl *cluster) (int64, string) {
	names := []string{"sc_hits", "sc_misses", "sc_invalidations_sent", "sc_acks_received", "sc_updates_sent",
		"sc_writes_held", "sc_installs", "sc_frames_dropped"}
	sum := map[string]int64{}
	for _, s := range cl.servers {
		if !s.running() {
			continue
		}
		rep, err := respOnce(s.respAddr(), "INFO", "shoal")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(rep.Str, "\r\n") {
			name, value, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			var n int64
			if _, err := fmt.Sscan(value, &n); err == nil {
				sum[name] += n
			}
		}
	}
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s=%d", strings.TrimPrefix(n, "sc_"), sum[n]))
	}
	return sum["sc_hits"], strings.Join(parts, " ")
}

// respOnce sends one command to addr on a connection of its own (1 s to
// connect, 5 s for the reply).
func respOnce(addr string, args ...string) (reply, error) {
	rc, err := dialRESP(addr, time.Second)
	if err != nil {
		return reply{}, err
	}
	defer rc.Close()
	return rc.Do(5*time.Second, args...)
}
