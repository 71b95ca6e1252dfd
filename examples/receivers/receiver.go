// A dsync `http` step receiver in Go (standard library only).
//
// Forward action:  POST /refresh        -> "refreshes" data_id, once per Idempotency-Key
// Compensation:    POST /refresh/undo   -> undoes what that key's forward call did, once
//
// Both are idempotent by the Idempotency-Key header (the step code; the compensation's
// key is the step code + "-compensate"): a repeated call answers what the first answered
// and changes nothing again. State is kept in memory (use a table in real life).
//
//	go run receiver.go PORT [JOURNAL_FILE]
//
// Each call is appended to JOURNAL_FILE as one line: "<method> <path> <key> <status>".
package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
)

type answer struct {
	status int
	body   map[string]any
}

var (
	mu      sync.Mutex
	answers = map[string]answer{} // idempotency key -> what was answered
	applied = map[string]int{}    // data_id -> refreshes applied (the "side effect")
	journal string
)

func reply(w http.ResponseWriter, a answer) {
	data, _ := json.Marshal(a.body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	w.Write(data)
}

func handle(w http.ResponseWriter, r *http.Request) {
	mu.Lock()
	defer mu.Unlock()
	if r.Method == http.MethodGet {
		reply(w, answer{200, map[string]any{"applied": applied}})
		return
	}
	key := r.Header.Get("Idempotency-Key")
	var ctx struct {
		DataID string `json:"data_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&ctx); err != nil {
		reply(w, answer{400, map[string]any{"error": "not JSON"}})
		return
	}
	a, seen := answers[key]
	switch {
	case key == "" || (r.URL.Path != "/refresh" && r.URL.Path != "/refresh/undo"):
		a = answer{400, map[string]any{"error": "unknown action or no Idempotency-Key"}}
	case seen: // a retry: the same answer, nothing applied again
	case r.URL.Path == "/refresh":
		applied[ctx.DataID]++
		a = answer{200, map[string]any{"refreshed": ctx.DataID, "key": key, "applied": applied[ctx.DataID]}}
		answers[key] = a
	default:
		forward := strings.TrimSuffix(key, "-compensate")
		_, undone := answers[forward]
		if undone {
			applied[ctx.DataID]--
			delete(answers, forward)
		}
		a = answer{200, map[string]any{"undone": undone, "key": key, "applied": applied[ctx.DataID]}}
		answers[key] = a
	}
	if journal != "" {
		if f, err := os.OpenFile(journal, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "%s %s %s %d\n", r.Method, r.URL.Path, key, a.status)
			f.Close()
		}
	}
	reply(w, a)
}

func main() {
	if len(os.Args) > 2 {
		journal = os.Args[2]
	}
	http.HandleFunc("/", handle)
	if err := http.ListenAndServe("127.0.0.1:"+os.Args[1], nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
