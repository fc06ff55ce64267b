package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	jobqueue "github.com/django-jobqueue/django-jobqueue/clients/go"
)

// scenarioError is a step that did not hold; its message is the report's reason.
type scenarioError struct{ message string }

func (e *scenarioError) Error() string { return e.message }

func fail(format string, args ...any) error {
	return &scenarioError{fmt.Sprintf(format, args...)}
}

var reference = regexp.MustCompile(`\$\{([^}]+)\}`)

// scenario runs one scenario's steps (clients/conformance/README.md) with the values
// they saved.
type scenario struct {
	url     string
	tokens  map[string]string
	clients map[string]*jobqueue.Client
	saved   map[string]any
}

func newScenario(url string, tokens map[string]string) *scenario {
	run := strconv.FormatInt(time.Now().UnixNano(), 36) + strconv.FormatInt(int64(os.Getpid()), 36)
	return &scenario{url: url, tokens: tokens, clients: map[string]*jobqueue.Client{}, saved: map[string]any{"run": run}}
}

func first(step map[string]any, names ...string) (any, bool) {
	for _, name := range names {
		if value, ok := step[name]; ok {
			return value, true
		}
	}
	return nil, false
}

// canonicalVerb: ids_add and id.add are ids.add; worker.claim is claim.
func canonicalVerb(name string) string {
	verb := strings.TrimSpace(name)
	for _, prefix := range []string{"worker.", "worker_"} {
		verb = strings.TrimPrefix(verb, prefix)
	}
	for _, prefix := range []string{"ids_", "id_", "id.", "ids."} {
		if strings.HasPrefix(verb, prefix) {
			return "ids." + strings.TrimPrefix(verb, prefix)
		}
	}
	switch verb {
	case "get":
		return "get_job"
	case "batch", "enqueue_many":
		return "enqueue_batch"
	case "stop":
		return "stop_worker"
	}
	return verb
}

func (s *scenario) run(data map[string]any) error {
	steps, ok := data["steps"].([]any)
	if !ok {
		return fail("no steps")
	}
	for n, item := range steps {
		step, ok := item.(map[string]any)
		if !ok {
			return fail("step %d is not an object", n+1)
		}
		name, _ := first(step, "verb", "call", "op")
		verb := canonicalVerb(fmt.Sprint(name))
		if err := s.step(step, verb); err != nil {
			return fail("step %d (%s): %s", n+1, verb, err)
		}
	}
	return nil
}

func (s *scenario) client(role string) (*jobqueue.Client, error) {
	token, ok := s.tokens[role]
	if !ok {
		return nil, fail("no token of role %s in JOBQUEUE_TOKENS", role)
	}
	if s.clients[role] == nil {
		s.clients[role] = jobqueue.NewClient(s.url, token)
	}
	return s.clients[role], nil
}

func (s *scenario) step(step map[string]any, verb string) error {
	role := "all"
	if value, ok := first(step, "token", "role", "as"); ok {
		role = fmt.Sprint(value)
	}
	client, err := s.client(role)
	if err != nil {
		return err
	}
	rawArgs, _ := first(step, "args", "params", "with", "input")
	if rawArgs == nil {
		rawArgs = map[string]any{}
	}
	resolved, err := s.resolve(rawArgs)
	if err != nil {
		return err
	}
	args, ok := resolved.(map[string]any)
	if !ok {
		return fail("args is not an object")
	}
	expectedError, wantError := first(step, "error", "expect_error", "raises")
	wantError = wantError && expectedError != nil
	answer, callErr := call(client, verb, args)
	if _, bad := callErr.(*scenarioError); bad {
		return callErr
	}
	if callErr != nil {
		if jobqueue.Class(callErr) == "" {
			return fail("unexpected error: %v", callErr)
		}
		if !wantError {
			return fail("unexpected %s: %v", jobqueue.Class(callErr), callErr)
		}
		expected, err := s.resolve(expectedError)
		if err != nil {
			return err
		}
		if err := checkError(expected, callErr); err != nil {
			return err
		}
		return s.save(step, errorJSON(callErr))
	}
	if wantError {
		return fail("expected %s, got the answer %s", dump(expectedError), dump(answer))
	}
	if expected, ok := first(step, "expect", "expected", "result"); ok {
		resolvedExpected, err := s.resolve(expected)
		if err != nil {
			return err
		}
		if problem := mismatch(resolvedExpected, answer, ""); problem != "" {
			return fail("%s in %s", problem, dump(answer))
		}
	}
	return s.save(step, answer)
}

func (s *scenario) save(step map[string]any, answer any) error {
	save, ok := step["save"]
	if !ok || save == nil {
		return nil
	}
	if name, ok := save.(string); ok {
		s.saved[name] = answer
		return nil
	}
	paths, ok := save.(map[string]any)
	if !ok {
		return fail("save is neither a name nor an object")
	}
	for name, path := range paths {
		text := strings.TrimPrefix(strings.TrimPrefix(fmt.Sprint(path), "$"), ".")
		value, err := lookup(answer, text)
		if err != nil {
			return err
		}
		s.saved[name] = value
	}
	return nil
}

func lookup(root any, path string) (any, error) {
	node := root
	for _, part := range strings.Split(path, ".") {
		if part == "" {
			continue
		}
		switch current := node.(type) {
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(current) {
				return nil, fail("nothing at %s", path)
			}
			node = current[i]
		case map[string]any:
			value, ok := current[part]
			if !ok {
				return nil, fail("nothing at %s", path)
			}
			node = value
		default:
			return nil, fail("nothing at %s", path)
		}
	}
	return node, nil
}

// resolve replaces "$name.path" strings with saved values and ${name.path} in text.
func (s *scenario) resolve(node any) (any, error) {
	switch value := node.(type) {
	case string:
		if strings.HasPrefix(value, "$") && !strings.HasPrefix(value, "${") && len(value) > 1 {
			return lookup(s.saved, value[1:])
		}
		var problem error
		text := reference.ReplaceAllStringFunc(value, func(match string) string {
			found, err := lookup(s.saved, match[2:len(match)-1])
			if err != nil {
				problem = err
				return ""
			}
			if text, ok := found.(string); ok {
				return text
			}
			return dump(found)
		})
		return text, problem
	case map[string]any:
		out := make(map[string]any, len(value))
		for key, item := range value {
			resolved, err := s.resolve(item)
			if err != nil {
				return nil, err
			}
			out[key] = resolved
		}
		return out, nil
	case []any:
		out := make([]any, len(value))
		for i, item := range value {
			resolved, err := s.resolve(item)
			if err != nil {
				return nil, err
			}
			out[i] = resolved
		}
		return out, nil
	}
	return node, nil
}

func errorJSON(err error) map[string]any {
	body := map[string]any{}
	api, _ := jobqueue.AsAPIError(err)
	for key, value := range api.Body {
		body[key] = value
	}
	body["status"] = float64(api.Status)
	body["code"] = api.Code
	body["class"] = jobqueue.Class(err)
	return body
}

func checkError(expected any, err error) error {
	class := jobqueue.Class(err)
	api, _ := jobqueue.AsAPIError(err)
	if want, ok := expected.(string); ok {
		if want != class && want != api.Code {
			return fail("expected %s, got %s: %v", want, class, err)
		}
		return nil
	}
	wanted, ok := expected.(map[string]any)
	if !ok {
		return fail("error is neither a name nor an object")
	}
	rest := map[string]any{}
	for key, value := range wanted {
		rest[key] = value
	}
	cls, ok := rest["class"]
	if !ok {
		cls, ok = rest["type"]
	}
	delete(rest, "class")
	delete(rest, "type")
	if ok && cls != class {
		return fail("expected %v, got %s: %v", cls, class, err)
	}
	if problem := mismatch(rest, errorJSON(err), ""); problem != "" {
		return fail("%s in the error %s", problem, dump(errorJSON(err)))
	}
	return nil
}

// mismatch says why actual does not contain expected, or "" when it does.
func mismatch(expected, actual any, where string) string {
	label := where
	if label == "" {
		label = "the answer"
	}
	switch want := expected.(type) {
	case map[string]any:
		got, ok := actual.(map[string]any)
		if !ok {
			return fmt.Sprintf("expected an object at %s, got %s", label, dump(actual))
		}
		for key, value := range want {
			path := key
			if where != "" {
				path = where + "." + key
			}
			item, ok := got[key]
			if !ok {
				return "no " + path
			}
			if problem := mismatch(value, item, path); problem != "" {
				return problem
			}
		}
		return ""
	case []any:
		got, ok := actual.([]any)
		if !ok || len(got) != len(want) {
			return fmt.Sprintf("expected %d items at %s, got %s", len(want), label, dump(actual))
		}
		for i := range want {
			if problem := mismatch(want[i], got[i], fmt.Sprintf("%s[%d]", where, i)); problem != "" {
				return problem
			}
		}
		return ""
	}
	if reflect.DeepEqual(expected, actual) {
		return ""
	}
	return fmt.Sprintf("%s is %s, expected %s", label, dump(actual), dump(expected))
}

func dump(value any) string {
	data, err := json.Marshal(value)
	if err != nil {
		return fmt.Sprint(value)
	}
	return string(data)
}
