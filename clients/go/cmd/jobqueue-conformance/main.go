// Command jobqueue-conformance is the Go client's conformance runner
// (clients/conformance/README.md):
//
//	jobqueue-conformance run <scenarios_dir>   every scenario JSON through the client
//	jobqueue-conformance worker                a Worker on $JOBQUEUE_QUEUE until SIGTERM
//
// Environment: JOBQUEUE_URL (the gateway, http://127.0.0.1:PORT/sdk) and JOBQUEUE_TOKENS
// (a JSON file mapping a token role to its token); for worker, JOBQUEUE_QUEUE and
// JOBQUEUE_CONCURRENCY (default 4).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	jobqueue "github.com/django-jobqueue/django-jobqueue/clients/go"
)

const lang = "go"

func main() {
	var code int
	var err error
	switch {
	case len(os.Args) == 3 && os.Args[1] == "run":
		code, err = run(os.Args[2])
	case len(os.Args) == 2 && os.Args[1] == "worker":
		err = worker()
	default:
		fmt.Fprintln(os.Stderr, "usage: jobqueue-conformance run <scenarios_dir> | worker")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "conformance (%s): %v\n", lang, err)
		os.Exit(2)
	}
	os.Exit(code)
}

func env(name string) (string, error) {
	value := strings.TrimSpace(os.Getenv(name))
	if value == "" {
		return "", fmt.Errorf("%s is not set", name)
	}
	return value, nil
}

func tokens() (map[string]string, error) {
	path, err := env("JOBQUEUE_TOKENS")
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read JOBQUEUE_TOKENS %s: %w", path, err)
	}
	roles := map[string]string{}
	if err := json.Unmarshal(data, &roles); err != nil {
		return nil, fmt.Errorf("cannot read JOBQUEUE_TOKENS %s: %w", path, err)
	}
	return roles, nil
}

func run(dir string) (int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		return 2, fmt.Errorf("no scenario JSON in %s", dir)
	}
	sort.Strings(files)
	url, err := env("JOBQUEUE_URL")
	if err != nil {
		return 2, err
	}
	roles, err := tokens()
	if err != nil {
		return 2, err
	}
	passed, failed := 0, 0
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		var data map[string]any
		raw, err := os.ReadFile(file)
		if err == nil {
			err = json.Unmarshal(raw, &data)
		}
		if err == nil {
			if given, ok := data["name"].(string); ok && given != "" {
				name = given
			}
			err = newScenario(url, roles).run(data)
		}
		if err != nil {
			fmt.Printf("not ok %s: %s\n", name, strings.Join(strings.Fields(err.Error()), " "))
			failed++
		} else {
			fmt.Printf("ok %s\n", name)
			passed++
		}
	}
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return 1, nil
	}
	return 0, nil
}

// worker is the mixed drain's worker: echo and spawn (README "The worker") until SIGTERM.
func worker() error {
	url, err := env("JOBQUEUE_URL")
	if err != nil {
		return err
	}
	roles, err := tokens()
	if err != nil {
		return err
	}
	token := ""
	for _, role := range []string{"work", "worker", "all", "admin"} {
		if roles[role] != "" {
			token = roles[role]
			break
		}
	}
	if token == "" {
		return fmt.Errorf("JOBQUEUE_TOKENS has no work token")
	}
	queue, err := env("JOBQUEUE_QUEUE")
	if err != nil {
		return err
	}
	concurrency := 4
	if text := strings.TrimSpace(os.Getenv("JOBQUEUE_CONCURRENCY")); text != "" {
		if concurrency, err = strconv.Atoi(text); err != nil {
			return fmt.Errorf("JOBQUEUE_CONCURRENCY: %w", err)
		}
	}
	client := jobqueue.NewClient(url, token)
	handlers := map[string]jobqueue.Handler{
		"conformance.echo": func(ctx context.Context, job *jobqueue.JobContext) (any, error) {
			return map[string]any{"lang": lang, "payload": job.Payload}, nil
		},
		"conformance.spawn": func(ctx context.Context, job *jobqueue.JobContext) (any, error) {
			var spec struct {
				JobType string          `json:"job_type"`
				Queue   string          `json:"queue"`
				Payload json.RawMessage `json:"payload"`
			}
			if err := job.Decode(&spec); err != nil {
				return nil, jobqueue.Permanent(err)
			}
			child, err := job.Client.Enqueue(ctx, spec.JobType, spec.Payload, jobqueue.EnqueueOptions{Queue: spec.Queue})
			if err != nil {
				return nil, err
			}
			return map[string]any{"lang": lang, "jid": child.JID}, nil
		},
		"conformance.sleep": func(ctx context.Context, job *jobqueue.JobContext) (any, error) {
			var spec struct {
				Ms int64 `json:"ms"`
			}
			if err := job.Decode(&spec); err != nil {
				return nil, jobqueue.Permanent(err)
			}
			time.Sleep(time.Duration(spec.Ms) * time.Millisecond)
			return map[string]any{"lang": lang, "slept": spec.Ms}, nil
		},
	}
	w, err := jobqueue.NewWorker(client, handlers, jobqueue.WorkerOptions{
		Queues: []string{queue}, Concurrency: concurrency,
		Name:   fmt.Sprintf("conformance-%s-%d", lang, os.Getpid()),
		Logger: log.New(os.Stderr, "jobqueue-worker: ", log.LstdFlags),
	})
	if err != nil {
		return err
	}
	stats, err := w.RunUntilSignal(context.Background())
	fmt.Fprintf(os.Stderr, "conformance (%s): worker stopped: %s\n", lang, stats)
	return err
}
