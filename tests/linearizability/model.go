package main

// The sequential specification the histories are checked against: one
// Redis string per key (Porcupine's partitioned key-value model, one
// partition per key), and the acknowledged-write ledger.

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/anishathalye/porcupine"
)

type opKind byte

const (
	opGet  opKind = 'g'
	opSet  opKind = 's'
	opIncr opKind = 'i'
	opDel  opKind = 'd'
)

func (k opKind) String() string {
	switch k {
	case opGet:
		return "GET"
	case opSet:
		return "SET"
	case opIncr:
		return "INCR"
	case opDel:
		return "DEL"
	}
	return "?"
}

type kvInput struct {
	Kind opKind
	Key  string
	Val  string // SET's value
}

// kvOutput is what the client saw. Unknown: no answer (timeout, broken
// connection, an error that says the command may have been applied); the
// operation may or may not have taken effect, at any time after its call,
// so its return time is "never" (after every other event of the history).
type kvOutput struct {
	Unknown bool
	Nil     bool   // GET: the key was missing
	Val     string // GET: the value
	N       int64  // INCR: the new value; DEL: keys removed
}

// absent is the state of a missing key. SET never writes an empty value.
const absent = ""

func kvStep(state, input, output interface{}) (bool, interface{}) {
	st := state.(string)
	in := input.(kvInput)
	out := output.(kvOutput)
	switch in.Kind {
	case opGet:
		if out.Unknown {
			return true, st
		}
		if out.Nil {
			return st == absent, st
		}
		return st != absent && out.Val == st, st
	case opSet:
		return true, in.Val
	case opIncr:
		cur := int64(0)
		if st != absent {
			n, err := strconv.ParseInt(st, 10, 64)
			if err != nil {
				// INCR of a non-integer fails without effect.
				return out.Unknown, st
			}
			cur = n
		}
		next := strconv.FormatInt(cur+1, 10)
		if out.Unknown {
			return true, next
		}
		return out.N == cur+1, next
	case opDel:
		if out.Unknown {
			return true, absent
		}
		return (out.N == 1) == (st != absent), absent
	}
	return false, st
}

func describeOp(input, output interface{}) string {
	in := input.(kvInput)
	out := output.(kvOutput)
	var res string
	switch {
	case out.Unknown:
		res = "?"
	case in.Kind == opGet && out.Nil:
		res = "nil"
	case in.Kind == opGet:
		res = strconv.Quote(out.Val)
	case in.Kind == opSet:
		res = "OK"
	default:
		res = strconv.FormatInt(out.N, 10)
	}
	switch in.Kind {
	case opSet:
		return fmt.Sprintf("SET %s %s -> %s", in.Key, in.Val, res)
	default:
		return fmt.Sprintf("%s %s -> %s", in.Kind, in.Key, res)
	}
}

var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(kvInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init:              func() interface{} { return absent },
	Step:              kvStep,
	Equal:             func(a, b interface{}) bool { return a.(string) == b.(string) },
	DescribeOperation: describeOp,
	DescribeState: func(state interface{}) string {
		if state.(string) == absent {
			return "(missing)"
		}
		return strconv.Quote(state.(string))
	},
}

// ledgerLosses checks the acknowledged writes against the final values
// read once every fault has healed: an acknowledged write that no other
// write of its key can follow (every other write of the key, acknowledged
// or of unknown outcome, returned before it was called) must be the final
// state: its SET's value, its INCR's result, or missing after its DEL.
// Returns one line per lost write.
func ledgerLosses(history []porcupine.Operation, final map[string]kvOutput) []string {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range history {
		in := op.Input.(kvInput)
		if in.Kind == opGet {
			continue
		}
		byKey[in.Key] = append(byKey[in.Key], op)
	}
	var losses []string
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		writes := byKey[key]
		fin, ok := final[key]
		if !ok {
			losses = append(losses, fmt.Sprintf("%s: no final read", key))
			continue
		}
		for i, w := range writes {
			out := w.Output.(kvOutput)
			if out.Unknown {
				continue
			}
			last := true
			for j, x := range writes {
				if j != i && x.Return >= w.Call {
					last = false
					break
				}
			}
			if !last {
				continue
			}
			in := w.Input.(kvInput)
			var want string
			switch in.Kind {
			case opSet:
				want = in.Val
			case opIncr:
				want = strconv.FormatInt(out.N, 10)
			case opDel:
				want = absent
			}
			got := fin.Val
			if fin.Nil {
				got = absent
			}
			if got != want {
				losses = append(losses, fmt.Sprintf("%s: the last acknowledged write %s is lost: the final value is %q",
					key, describeOp(w.Input, w.Output), got))
			}
		}
	}
	return losses
}
