package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	jobqueue "github.com/django-jobqueue/django-jobqueue/clients/go"
)

var enqueueOptions = []string{"queue", "priority", "delay", "run_at", "expires_ms", "timeout_ms",
	"max_retry", "unique_key", "unique_mode", "unique_ttl_ms", "id", "limit_key", "batch", "after",
	"on_upstream_failure"}

// known refuses an argument the verb does not take, and a missing required one.
func known(args map[string]any, optional []string, required ...string) error {
	names := map[string]bool{}
	for _, name := range append(append([]string{}, optional...), required...) {
		names[name] = true
	}
	unknown := []string{}
	for name := range args {
		if !names[name] {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fail("unknown argument %s", unknown[0])
	}
	for _, name := range required {
		if _, ok := args[name]; !ok {
			return fail("missing argument %s", name)
		}
	}
	return nil
}

// convert decodes a JSON value (a map from the scenario) into a typed value.
func convert(value any, out any) error {
	data, err := json.Marshal(value)
	if err == nil {
		err = json.Unmarshal(data, out)
	}
	if err != nil {
		return fail("bad arguments: %v", err)
	}
	return nil
}

// tree is a client answer as the gateway's JSON.
func tree(value any) any {
	var out any
	data, err := json.Marshal(value)
	if err != nil || json.Unmarshal(data, &out) != nil {
		return fmt.Sprint(value)
	}
	return out
}

func text(args map[string]any, name string) string {
	value, _ := args[name].(string)
	return value
}

func jobSpec(args map[string]any) (jobqueue.JobSpec, error) {
	if err := known(args, append([]string{"payload"}, enqueueOptions...), "job_type"); err != nil {
		return jobqueue.JobSpec{}, err
	}
	options := map[string]any{}
	for _, name := range enqueueOptions {
		if value, ok := args[name]; ok {
			options[name] = value
		}
	}
	spec := jobqueue.JobSpec{JobType: text(args, "job_type"), Payload: args["payload"]}
	return spec, convert(options, &spec.Options)
}

// call makes verb through the client; the answer is the gateway's JSON.
func call(client *jobqueue.Client, verb string, args map[string]any) (any, error) {
	ctx := context.Background()
	switch verb {
	case "enqueue":
		spec, err := jobSpec(args)
		if err != nil {
			return nil, err
		}
		answer, err := client.Enqueue(ctx, spec.JobType, spec.Payload, spec.Options)
		return tree(answer), err
	case "enqueue_batch":
		if err := known(args, nil, "jobs"); err != nil {
			return nil, err
		}
		items, _ := args["jobs"].([]any)
		specs := make([]jobqueue.JobSpec, 0, len(items))
		for _, item := range items {
			job, _ := item.(map[string]any)
			spec, err := jobSpec(job)
			if err != nil {
				return nil, err
			}
			specs = append(specs, spec)
		}
		results, err := client.EnqueueBatch(ctx, specs)
		return map[string]any{"results": tree(results)}, err
	case "get_job", "cancel", "retry":
		if err := known(args, nil, "jid"); err != nil {
			return nil, err
		}
		jid := text(args, "jid")
		switch verb {
		case "get_job":
			job, err := client.GetJob(ctx, jid)
			return tree(job), err
		case "cancel":
			result, err := client.Cancel(ctx, jid)
			return tree(result), err
		}
		retried, err := client.Retry(ctx, jid)
		return map[string]any{"retried": retried}, err
	case "ids.add", "ids.set", "ids.update":
		if err := known(args, []string{"value", "job_type", "at", "delay"}, "queue", "id"); err != nil {
			return nil, err
		}
		value := jobqueue.IDValue{Value: args["value"], JobType: text(args, "job_type"), At: text(args, "at"), Delay: args["delay"]}
		queue, id := text(args, "queue"), text(args, "id")
		switch verb {
		case "ids.add":
			added, err := client.Add(ctx, queue, id, value)
			return map[string]any{"added": added}, err
		case "ids.set":
			set, err := client.Set(ctx, queue, id, value)
			return map[string]any{"set": set}, err
		}
		updated, err := client.Update(ctx, queue, id, value)
		return map[string]any{"updated": updated}, err
	case "ids.cancel":
		if err := known(args, nil, "queue", "id"); err != nil {
			return nil, err
		}
		cancelled, err := client.CancelID(ctx, text(args, "queue"), text(args, "id"))
		return map[string]any{"cancelled": cancelled}, err
	case "ids.get":
		if err := known(args, nil, "queue", "id"); err != nil {
			return nil, err
		}
		job, err := client.GetID(ctx, text(args, "queue"), text(args, "id"))
		if job == nil {
			return nil, err
		}
		return tree(job), err
	case "ids.list":
		if err := known(args, []string{"prefix", "state", "limit", "cursor"}, "queue"); err != nil {
			return nil, err
		}
		options := jobqueue.ListOptions{Prefix: text(args, "prefix"), State: text(args, "state"), Cursor: text(args, "cursor")}
		if limit, ok := args["limit"].(float64); ok {
			options.Limit = int(limit)
		}
		page, err := client.List(ctx, text(args, "queue"), options)
		return tree(page), err
	case "register":
		if err := known(args, []string{"host", "pid", "languages", "job_types", "concurrency", "version"}, "name", "queues"); err != nil {
			return nil, err
		}
		var options jobqueue.RegisterOptions
		if err := convert(args, &options); err != nil {
			return nil, err
		}
		registration, err := client.Register(ctx, options)
		return tree(registration), err
	case "claim":
		if err := known(args, []string{"job_types", "limit", "wait_ms", "worker", "lease_ms"}, "queues"); err != nil {
			return nil, err
		}
		options := jobqueue.ClaimOptions{Limit: 1}
		if err := convert(args, &options); err != nil {
			return nil, err
		}
		jobs, err := client.Claim(ctx, options)
		return map[string]any{"jobs": tree(jobs)}, err
	case "heartbeat":
		if err := known(args, []string{"lease_ms"}, "jid", "lease_token"); err != nil {
			return nil, err
		}
		leaseMs, _ := args["lease_ms"].(float64)
		asked, err := client.Heartbeat(ctx, text(args, "jid"), text(args, "lease_token"), int64(leaseMs))
		return map[string]any{"cancel_requested": asked}, err
	case "complete":
		if err := known(args, []string{"result"}, "jid", "lease_token"); err != nil {
			return nil, err
		}
		status, err := client.Complete(ctx, text(args, "jid"), text(args, "lease_token"), args["result"])
		return map[string]any{"status": status}, err
	case "fail":
		if err := known(args, []string{"error", "exception_class", "retry", "cancelled"}, "jid", "lease_token"); err != nil {
			return nil, err
		}
		options := jobqueue.FailOptions{Error: text(args, "error"), ExceptionClass: text(args, "exception_class")}
		if retry, ok := args["retry"].(bool); ok {
			options.NoRetry = !retry
		}
		if cancelled, ok := args["cancelled"].(bool); ok {
			options.Cancelled = cancelled
		}
		status, err := client.Fail(ctx, text(args, "jid"), text(args, "lease_token"), options)
		return map[string]any{"status": status}, err
	case "stop_worker":
		if err := known(args, nil, "name"); err != nil {
			return nil, err
		}
		stopped, err := client.StopWorker(ctx, text(args, "name"))
		return map[string]any{"name": text(args, "name"), "stopped": stopped}, err
	}
	return nil, fail("unknown verb %s", verb)
}
