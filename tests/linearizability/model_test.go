package main

// The checker is only as good as its model: these histories are known
// legal or illegal, and the ledger must tell a lost write from one that a
// later write may have overwritten.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const never = int64(1) << 60

func op(client int, kind opKind, key, val string, call, ret int64, out kvOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: kvInput{Kind: kind, Key: key, Val: val}, Call: call, Output: out, Return: ret}
}

func get(client int, key string, call, ret int64, val string) porcupine.Operation {
	if val == "" {
		return op(client, opGet, key, "", call, ret, kvOutput{Nil: true})
	}
	return op(client, opGet, key, "", call, ret, kvOutput{Val: val})
}

func set(client int, key, val string, call, ret int64) porcupine.Operation {
	return op(client, opSet, key, val, call, ret, kvOutput{})
}

func unknown(client int, kind opKind, key, val string, call int64) porcupine.Operation {
	return op(client, kind, key, val, call, never, kvOutput{Unknown: true})
}

func check(t *testing.T, h []porcupine.Operation) porcupine.CheckResult {
	t.Helper()
	return porcupine.CheckOperationsTimeout(kvModel, h, 0)
}

func TestModel_sequentialHistoryIsLegal(t *testing.T) {
	h := []porcupine.Operation{
		get(0, "k", 0, 1, ""),
		set(0, "k", "10", 2, 3),
		op(1, opIncr, "k", "", 4, 5, kvOutput{N: 11}),
		get(1, "k", 6, 7, "11"),
		op(0, opDel, "k", "", 8, 9, kvOutput{N: 1}),
		op(0, opDel, "k", "", 10, 11, kvOutput{N: 0}),
		op(1, opIncr, "k", "", 12, 13, kvOutput{N: 1}),
		get(2, "j", 0, 20, ""),
	}
	if r := check(t, h); r != porcupine.Ok {
		t.Fatalf("got %v", r)
	}
}

func TestModel_staleReadIsIllegal(t *testing.T) {
	h := []porcupine.Operation{
		set(0, "k", "1", 0, 1),
		set(0, "k", "2", 2, 3),
		get(1, "k", 4, 5, "1"),
	}
	if r := check(t, h); r != porcupine.Illegal {
		t.Fatalf("got %v", r)
	}
}

func TestModel_concurrentReadMaySeeEither(t *testing.T) {
	h := []porcupine.Operation{
		set(0, "k", "1", 0, 1),
		set(0, "k", "2", 2, 10),
		get(1, "k", 3, 4, "1"),
		get(2, "k", 5, 6, "2"),
	}
	if r := check(t, h); r != porcupine.Ok {
		t.Fatalf("got %v", r)
	}
}

func TestModel_unknownWriteMayHappenLateOrNever(t *testing.T) {
	h := []porcupine.Operation{
		set(0, "k", "1", 0, 1),
		unknown(1, opSet, "k", "2", 2),
		get(2, "k", 5, 6, "1"),
		get(2, "k", 7, 8, "2"),
		get(2, "k", 9, 10, "2"),
	}
	if r := check(t, h); r != porcupine.Ok {
		t.Fatalf("got %v", r)
	}
	// ...but once seen it cannot be unseen (a read of data that a crash
	// then lost).
	h = append(h, get(2, "k", 11, 12, "1"))
	if r := check(t, h); r != porcupine.Illegal {
		t.Fatalf("got %v", r)
	}
}

func TestModel_unknownWriteCannotHappenBeforeItsCall(t *testing.T) {
	h := []porcupine.Operation{
		get(2, "k", 0, 1, "2"),
		unknown(1, opSet, "k", "2", 2),
	}
	if r := check(t, h); r != porcupine.Illegal {
		t.Fatalf("got %v", r)
	}
}

func TestModel_lostIncrementIsIllegal(t *testing.T) {
	h := []porcupine.Operation{
		op(0, opIncr, "k", "", 0, 1, kvOutput{N: 1}),
		op(1, opIncr, "k", "", 2, 3, kvOutput{N: 1}),
	}
	if r := check(t, h); r != porcupine.Illegal {
		t.Fatalf("got %v", r)
	}
}

func TestModel_unknownIncrementCounts(t *testing.T) {
	h := []porcupine.Operation{
		op(0, opIncr, "k", "", 0, 1, kvOutput{N: 1}),
		unknown(1, opIncr, "k", "", 2),
		op(2, opIncr, "k", "", 3, 4, kvOutput{N: 3}),
	}
	if r := check(t, h); r != porcupine.Ok {
		t.Fatalf("got %v", r)
	}
}

func TestModel_wrongDeleteCountIsIllegal(t *testing.T) {
	h := []porcupine.Operation{
		set(0, "k", "1", 0, 1),
		op(1, opDel, "k", "", 2, 3, kvOutput{N: 0}),
	}
	if r := check(t, h); r != porcupine.Illegal {
		t.Fatalf("got %v", r)
	}
}

func TestModel_keysArePartitioned(t *testing.T) {
	h := []porcupine.Operation{
		set(0, "a", "1", 0, 1),
		set(1, "b", "2", 0, 1),
		get(2, "a", 2, 3, "1"),
		get(2, "b", 4, 5, "1"),
	}
	if r := check(t, h); r != porcupine.Illegal {
		t.Fatalf("got %v", r)
	}
	v, _, keys := verdict(checkKeys(h, time.Minute))
	if v != "illegal" || len(keys) != 1 || !strings.HasPrefix(keys[0], "b\n") ||
		!strings.Contains(keys[0], `cannot follow: GET b -> "1"`) {
		t.Fatalf("verdict %s, illegal keys %v", v, keys)
	}
}

func TestVisualization_isWritten(t *testing.T) {
	h := []porcupine.Operation{
		set(0, "k", "1", 0, 1),
		set(0, "k", "2", 2, 3),
		get(1, "k", 4, 5, "1"),
	}
	res, info := porcupine.CheckOperationsVerbose(kvModel, h, 0)
	if res != porcupine.Illegal {
		t.Fatalf("got %v", res)
	}
	path := filepath.Join(t.TempDir(), "v.html")
	if err := porcupine.VisualizePath(kvModel, info, path); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Fatalf("no visualisation: %v", err)
	}
}

func TestLedger_lastAcknowledgedWriteMustSurvive(t *testing.T) {
	h := []porcupine.Operation{
		set(0, "k", "1", 0, 1),
		set(0, "k", "2", 2, 3),
	}
	if l := ledgerLosses(h, map[string]kvOutput{"k": {Val: "2"}}); len(l) != 0 {
		t.Fatalf("losses %v", l)
	}
	if l := ledgerLosses(h, map[string]kvOutput{"k": {Val: "1"}}); len(l) != 1 {
		t.Fatalf("losses %v", l)
	}
	if l := ledgerLosses(h, map[string]kvOutput{"k": {Nil: true}}); len(l) != 1 {
		t.Fatalf("losses %v", l)
	}
	if l := ledgerLosses(h, map[string]kvOutput{}); len(l) != 1 {
		t.Fatalf("losses %v", l)
	}
}

func TestLedger_laterOrConcurrentWritesMayOverwrite(t *testing.T) {
	h := []porcupine.Operation{
		set(0, "k", "1", 0, 10),
		set(1, "k", "2", 5, 6),
		unknown(2, opDel, "k", "", 20),
	}
	for _, fin := range []kvOutput{{Val: "1"}, {Val: "2"}, {Nil: true}} {
		if l := ledgerLosses(h, map[string]kvOutput{"k": fin}); len(l) != 0 {
			t.Fatalf("final %v: losses %v", fin, l)
		}
	}
	h = []porcupine.Operation{
		set(0, "k", "1", 0, 1),
		op(1, opIncr, "k", "", 2, 3, kvOutput{N: 2}),
	}
	if l := ledgerLosses(h, map[string]kvOutput{"k": {Val: "1"}}); len(l) != 1 {
		t.Fatalf("losses %v", l)
	}
}

// A narrowed history proves a legal history with long operations legal,
// and never an illegal one: a stale read stays illegal however narrowed.
func TestNarrow(t *testing.T) {
	ms := int64(time.Millisecond)
	legal := []porcupine.Operation{
		set(0, "k", "1", 0, ms),
		get(1, "k", 2*ms, 900*ms, "2"), // held up, answered late
		set(2, "k", "2", 3*ms, 898*ms),
		get(3, "k", 901*ms, 902*ms, "2"),
	}
	if res, _ := search(narrow(legal), time.Second); res != porcupine.Ok {
		t.Fatalf("a legal history was not proved legal: %v", res)
	}
	illegal := []porcupine.Operation{
		set(0, "k", "1", 0, ms),
		set(0, "k", "2", 2*ms, 3*ms),
		get(1, "k", 4*ms, 900*ms, "1"), // stale, however late
	}
	if res, _ := search(narrow(illegal), time.Second); res == porcupine.Ok {
		t.Fatal("an illegal history was proved legal")
	}
	if narrowed := narrow(illegal); narrowed[2].Call != 895*ms || narrowed[0].Call != 0 {
		t.Fatalf("narrowed intervals: %+v", narrowed)
	}
}

// checkKeys reports every key on its own: a legal key, an illegal one
// with its witness, and a key whose search cannot run for want of time.
func TestCheckKeys(t *testing.T) {
	h := []porcupine.Operation{
		set(0, "a", "1", 0, 1),
		get(1, "a", 2, 3, "1"),
		set(0, "b", "1", 0, 1),
		set(0, "b", "2", 2, 3),
		get(1, "b", 4, 5, "1"),
	}
	checks := checkKeys(h, time.Minute)
	if len(checks) != 2 || checks[0].key != "a" || checks[0].res != porcupine.Ok ||
		checks[1].key != "b" || checks[1].res != porcupine.Illegal || checks[1].ops != 3 {
		t.Fatalf("checks %+v", checks)
	}
	if v, _, _ := verdict(checks); v != "illegal" {
		t.Fatalf("verdict %s", v)
	}
	paths := visualize(checks, filepath.Join(t.TempDir(), "s"))
	if len(paths) != 1 || !strings.HasSuffix(paths[0], "s.b.html") {
		t.Fatalf("visualisations %v", paths)
	}
	if v, note, _ := verdict(checkKeys(h[:2], time.Nanosecond)); v != "undecided (the check timed out)" || !strings.Contains(note, "a (2 operations") {
		t.Fatalf("verdict %s, %s", v, note)
	}
	if v, note, _ := verdict(checkKeys(h[:2], time.Minute)); v != "legal" || note != "" {
		t.Fatalf("verdict %s, %s", v, note)
	}
}

// Merged GETs prove a burst of reads legal, keep a stale read illegal,
// and leave reads that share no instant apart.
func TestMergeReads(t *testing.T) {
	ms := int64(time.Millisecond)
	burst := []porcupine.Operation{
		set(0, "k", "1", 0, ms),
		get(1, "k", 2*ms, 900*ms, "1"),
		get(2, "k", 5*ms, 901*ms, "1"),
		set(3, "k", "2", 6*ms, 899*ms),
		get(4, "k", 7*ms, 902*ms, "2"),
		get(5, "k", 950*ms, 951*ms, "2"), // shares no instant with the burst
	}
	merged := mergeReads(burst)
	if len(merged) != 5 {
		t.Fatalf("merged %+v", merged)
	}
	for _, op := range merged {
		if op.Input.(kvInput).Kind == opGet && op.Output.(kvOutput).Val == "1" && (op.Call != 5*ms || op.Return != 900*ms) {
			t.Fatalf("the burst's reads of 1 merged into [%d, %d]", op.Call, op.Return)
		}
	}
	if res, _ := search(merged, time.Second); res != porcupine.Ok {
		t.Fatalf("a legal history was not proved legal: %v", res)
	}
	stale := []porcupine.Operation{
		set(0, "k", "1", 0, ms),
		get(1, "k", 2*ms, 900*ms, "1"),
		set(0, "k", "2", 3*ms, 4*ms),
		get(2, "k", 5*ms, 901*ms, "1"), // stale: called after 2 was written
	}
	if res, _ := search(mergeReads(stale), time.Second); res == porcupine.Ok {
		t.Fatal("an illegal history was proved legal")
	}
}

// The partition-backups history kept in testdata (4,012 operations, 12
// writes of unknown outcome, bursts of GETs held for 3 s by the cut)
// defeated the exact search and the narrowed one; with its GETs merged it
// is proved legal in well under a second.
func TestMergeReads_decidesTheKeptPartitionHistory(t *testing.T) {
	h, err := loadHistory("testdata/partition-backups-k00.history.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := search(mergeReads(h), 60*time.Second); res != porcupine.Ok {
		t.Fatalf("verdict %v", res)
	}
}
