package main

// How a history is checked: key by key (Porcupine's partitions of the
// key-value model), one key at a time, so that at most one search holds
// memory (a search that does not end grows Porcupine's cache by gigabytes
// a minute; searching every key at once ran a CI machine out of memory).
//
//  1. Every key gets an exact search of up to firstPass, on its
//     operations without the GETs dropDominatedReads removes (this changes
//     no verdict, and it is what makes most searches end in milliseconds).
//  2. The keys whose search timed out share the time left: each gets a
//     third of its share for a search with its GETs merged (mergeReads),
//     then a third for its narrowed operations (narrow); if neither proves
//     it legal, the rest for the exact search again.
// See docs/linearizability.md, "How a history is checked".

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// firstPass is the most the first exact search of one key may take.
const firstPass = 10 * time.Second

// keyCheck is the outcome of checking one key.
type keyCheck struct {
	key  string
	ops  int                   // the key's operations, as recorded
	res  porcupine.CheckResult // Ok, Illegal, or Unknown (timed out)
	by   string                // Ok only by a sufficient search: "merged GETs" or "narrowed"
	part []porcupine.Operation // the operations info refers to
	info porcupine.LinearizationInfo
	took time.Duration
}

// singleKey is kvModel for one key's operations (no partitions).
var singleKey = func() porcupine.Model {
	m := kvModel
	m.Partition = nil
	return m
}()

// searchMemory is the most memory (resident, bytes) one search may take:
// Porcupine's cache grows without bound on a search that does not end (a
// CI machine's 24 GB were gone once), so each search runs in a child
// process that is killed over this, and the key is then undecided.
var searchMemory int64 = 6 << 30

// search runs one exact search of up to budget (which must be positive:
// Porcupine takes 0 as no limit), in a child process bounded by
// searchMemory. For an illegal verdict the witness comes from a second
// search here, which an illegal history ends quickly.
func search(part []porcupine.Operation, budget time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	if budget <= 0 {
		return porcupine.Unknown, porcupine.LinearizationInfo{}
	}
	if flag.Lookup("test.v") != nil {
		// Under go test the executable is the test binary: search here.
		return searchHere(part, budget)
	}
	res, err := searchInChild(part, budget)
	if err != nil {
		fmt.Fprintf(os.Stderr, "linz: %v; searching in this process\n", err)
		return searchHere(part, budget)
	}
	if res == porcupine.Illegal {
		if again, info := searchHere(part, budget); again == porcupine.Illegal {
			return again, info
		}
	}
	return res, porcupine.LinearizationInfo{}
}

// searchHere is one exact search in this process.
func searchHere(part []porcupine.Operation, budget time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(singleKey, part, budget)
}

// Exit codes of a child's search (-search-one).
const (
	childLegal     = 0
	childIllegal   = 10
	childUndecided = 11
)

// searchOne is the child's side: checks the operations written to path
// within budget and exits with the verdict.
func searchOne(path string, budget time.Duration) int {
	part, err := loadHistory(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "linz:", err)
		return 2
	}
	switch res, _ := searchHere(part, budget); res {
	case porcupine.Ok:
		return childLegal
	case porcupine.Illegal:
		return childIllegal
	}
	return childUndecided
}

// searchInChild runs searchOne in a child process (this program again),
// killing it if its resident memory passes searchMemory or it outlives
// the budget by 10 s.
func searchInChild(part []porcupine.Operation, budget time.Duration) (porcupine.CheckResult, error) {
	self, err := os.Executable()
	if err != nil {
		return porcupine.Unknown, err
	}
	f, err := os.CreateTemp("", "linz-key-*.jsonl")
	if err != nil {
		return porcupine.Unknown, err
	}
	path := f.Name()
	f.Close()
	defer os.Remove(path)
	if err := dumpHistory(path, part); err != nil {
		return porcupine.Unknown, err
	}
	cmd := exec.Command(self, "-search-one", path, "-check-timeout", budget.String())
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return porcupine.Unknown, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(budget + 10*time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			code := cmd.ProcessState.ExitCode()
			switch code {
			case childLegal:
				return porcupine.Ok, nil
			case childIllegal:
				return porcupine.Illegal, nil
			case childUndecided:
				return porcupine.Unknown, nil
			}
			return porcupine.Unknown, fmt.Errorf("the search's child process ended with %v", err)
		case <-tick.C:
			over := residentBytes(cmd.Process.Pid) > searchMemory
			if over || time.Now().After(deadline) {
				cmd.Process.Kill()
				<-done
				if over {
					fmt.Fprintf(os.Stderr, "linz: a search passed %d MiB and was stopped: the key is undecided\n", searchMemory>>20)
				}
				return porcupine.Unknown, nil
			}
		}
	}
}

// residentBytes is the resident memory of process pid (0 if unknown).
func residentBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &kb)
			return kb << 10
		}
	}
	return 0
}

// checkKeys checks each key of history on its own, within timeout in all.
func checkKeys(history []porcupine.Operation, timeout time.Duration) []keyCheck {
	end := time.Now().Add(timeout)
	recorded := kvModel.Partition(history)
	parts := kvModel.Partition(dropDominatedReads(history))
	checks := make([]keyCheck, len(parts))
	var hard []int
	for i, part := range parts {
		start := time.Now()
		budget := time.Until(end)
		if budget > firstPass {
			budget = firstPass
		}
		res, info := search(part, budget)
		checks[i] = keyCheck{key: part[0].Input.(kvInput).Key, ops: len(recorded[i]), res: res,
			part: part, info: info, took: time.Since(start)}
		if res == porcupine.Unknown {
			hard = append(hard, i)
		}
	}
	for j, i := range hard {
		share := time.Until(end) / time.Duration(len(hard)-j)
		if share <= 0 {
			break
		}
		start := time.Now()
		for _, c := range []struct {
			by   string
			part []porcupine.Operation
		}{{"merged GETs", mergeReads(parts[i])}, {"narrowed", dropDominatedReads(narrow(parts[i]))}} {
			if res, _ := search(c.part, share/3); res == porcupine.Ok {
				checks[i].res, checks[i].by = porcupine.Ok, c.by
				break
			}
		}
		if checks[i].by == "" {
			res, info := search(parts[i], time.Until(start.Add(share)))
			if res != porcupine.Unknown {
				checks[i].res, checks[i].info = res, info
			}
		}
		checks[i].took += time.Since(start)
	}
	return checks
}

// verdict sums up the keys' checks: "legal", "illegal" or "undecided
// (the check timed out)", a note on how a legal verdict was reached if
// some key needed narrowing, and one line per key that is not legal
// (with a witness for an illegal key).
func verdict(checks []keyCheck) (string, string, []string) {
	var illegal, undecided, narrowed []string
	for _, c := range checks {
		switch {
		case c.res == porcupine.Illegal:
			illegal = append(illegal, c.key+witness(c.part, c.info))
		case c.res == porcupine.Unknown:
			undecided = append(undecided, fmt.Sprintf("%s (%d operations, searched %.0f s)", c.key, c.ops, c.took.Seconds()))
		case c.by != "":
			narrowed = append(narrowed, c.key+" ("+c.by+")")
		}
	}
	switch {
	case len(illegal) > 0:
		return "illegal", "", illegal
	case len(undecided) > 0:
		return "undecided (the check timed out)", "undecided keys: " + strings.Join(undecided, ", "), nil
	case len(narrowed) > 0:
		return "legal", fmt.Sprintf("%s: legal by a sufficient search (see docs/linearizability.md, \"How a history is checked\")", strings.Join(narrowed, ", ")), nil
	}
	return "legal", "", nil
}

// checkTimes describes how long the check took: in all, and the slowest keys.
func checkTimes(checks []keyCheck) string {
	var total time.Duration
	sorted := append([]keyCheck(nil), checks...)
	for _, c := range checks {
		total += c.took
	}
	sort.Slice(sorted, func(a, b int) bool { return sorted[a].took > sorted[b].took })
	var slow []string
	for _, c := range sorted {
		if len(slow) == 3 || c.took < 100*time.Millisecond {
			break
		}
		slow = append(slow, fmt.Sprintf("%s %.1f s", c.key, c.took.Seconds()))
	}
	s := fmt.Sprintf("%d keys in %.1f s", len(checks), total.Seconds())
	if len(slow) > 0 {
		s += " (slowest: " + strings.Join(slow, ", ") + ")"
	}
	return s
}

// dropDominatedReads removes every answered GET whose interval contains
// the interval of another answered GET of the same key with the same
// answer. This changes no verdict: in any linearization of what is left,
// the removed GET can take effect at the same instant as the one it
// contains (a GET changes no state and that instant is within its own
// interval), so the history is legal with it exactly when it is legal
// without it.
func dropDominatedReads(history []porcupine.Operation) []porcupine.Operation {
	type ans struct {
		key string
		out kvOutput
	}
	byAns := map[ans][]int{}
	for i, op := range history {
		in, out := op.Input.(kvInput), op.Output.(kvOutput)
		if in.Kind == opGet && !out.Unknown {
			a := ans{in.Key, out}
			byAns[a] = append(byAns[a], i)
		}
	}
	drop := make([]bool, len(history))
	for _, idx := range byAns {
		// Sorted by return, then by call descending: an interval can
		// contain only intervals that come before it here or have the
		// same return. Keep the latest call seen so far.
		sort.Slice(idx, func(x, y int) bool {
			a, b := history[idx[x]], history[idx[y]]
			if a.Return != b.Return {
				return a.Return < b.Return
			}
			return a.Call > b.Call
		})
		best := int64(-1 << 62)
		for _, i := range idx {
			if history[i].Call <= best {
				drop[i] = true // contains the interval whose call is best
				continue
			}
			best = history[i].Call
		}
	}
	var out []porcupine.Operation
	for i, op := range history {
		if !drop[i] {
			out = append(out, op)
		}
	}
	return out
}

// narrowAbove and narrowTo: narrow gives every answered operation that
// took more than narrowAbove the interval [return - narrowTo, return].
const (
	narrowAbove = 100 * time.Millisecond
	narrowTo    = 5 * time.Millisecond
)

// narrow is the second chance for a key whose search timed out:
// Porcupine's search is exponential in the operations a wrong guess leaves
// to reorder, and many long, overlapping operations (pipelined GETs and
// writes held up for seconds by a fault, then answered all at once) make
// it time out on legal histories. narrow gives every answered operation
// that took more than narrowAbove the interval [return - narrowTo,
// return] (writes of unknown outcome and short operations are left as
// they are). Any linearization of a narrowed history takes effect within
// the recorded intervals, so it is one of the recorded history too: a
// legal narrowed history proves the recorded one legal. An illegal one
// proves nothing.
func narrow(part []porcupine.Operation) []porcupine.Operation {
	narrowed := make([]porcupine.Operation, len(part))
	for i, op := range part {
		if !op.Output.(kvOutput).Unknown && op.Return-op.Call > int64(narrowAbove) {
			op.Call = op.Return - int64(narrowTo)
		}
		narrowed[i] = op
	}
	return narrowed
}

func witness(part []porcupine.Operation, info porcupine.LinearizationInfo) string {
	lins := info.PartialLinearizations()
	if len(lins) == 0 {
		return ""
	}
	var longest []int
	for _, l := range lins[0] {
		if len(l) > len(longest) {
			longest = l
		}
	}
	done := make(map[int]bool, len(longest))
	state := kvModel.Init()
	for _, id := range longest {
		done[id] = true
		_, state = kvModel.Step(state, part[id].Input, part[id].Output)
	}
	stuck := -1
	for i, op := range part {
		if !done[i] && (stuck < 0 || op.Return < part[stuck].Return) {
			stuck = i
		}
	}
	if stuck < 0 {
		return ""
	}
	at := func(op porcupine.Operation) string {
		ret := "never"
		if op.Return < int64(time.Hour) {
			ret = fmt.Sprintf("%.4fs", float64(op.Return)/1e9)
		}
		return fmt.Sprintf("[%.4fs, %s] %v", float64(op.Call)/1e9, ret, op.Metadata)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n      %d of its %d operations linearize, up to state %s;", len(longest), len(part), kvModel.DescribeState(state))
	from := len(longest) - 3
	if from < 0 {
		from = 0
	}
	for _, id := range longest[from:] {
		fmt.Fprintf(&b, "\n      linearized: %s %s", describeOp(part[id].Input, part[id].Output), at(part[id]))
	}
	fmt.Fprintf(&b, "\n      cannot follow: %s %s", describeOp(part[stuck].Input, part[stuck].Output), at(part[stuck]))
	return b.String()
}

// mergeReads replaces each set of answered GETs of one key with the same
// answer whose intervals share an instant by one GET over what they
// share ([latest call, earliest return]). It is a chance for keys whose
// search timed out: a burst of GETs held up by a fault and answered at
// once leaves the search one state per subset of them it has taken (the
// cache cannot merge them), which is exponential in the burst. A
// linearization of the merged history puts the merged GET at an instant
// every member's interval contains, where each member may take effect
// too, with the same answer (a GET changes nothing), so a legal merged
// history proves the recorded one legal. An illegal one proves nothing:
// the members might have needed different instants (a key missing twice,
// read as missing both times).
func mergeReads(part []porcupine.Operation) []porcupine.Operation {
	type ans struct {
		key string
		out kvOutput
	}
	byAns := map[ans][]porcupine.Operation{}
	var out []porcupine.Operation
	for _, op := range part {
		in, o := op.Input.(kvInput), op.Output.(kvOutput)
		if in.Kind == opGet && !o.Unknown {
			a := ans{in.Key, o}
			byAns[a] = append(byAns[a], op)
			continue
		}
		out = append(out, op)
	}
	for _, reads := range byAns {
		sort.Slice(reads, func(i, j int) bool { return reads[i].Call < reads[j].Call })
		group := reads[0]
		for _, r := range reads[1:] {
			// Sorted by call, so r's call is the group's latest: the group
			// keeps a shared instant while it is not after the earliest
			// return.
			if r.Call <= group.Return {
				group.Call = r.Call
				if r.Return < group.Return {
					group.Return = r.Return
				}
				continue
			}
			out = append(out, group)
			group = r
		}
		out = append(out, group)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	return out
}
