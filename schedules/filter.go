package schedules

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrBadParam is wrapped by every *ParamError.
var ErrBadParam = errors.New("schedules: bad parameter")

// ParamError is a query parameter (or flag) that does not parse.
type ParamError struct {
	Param  string // its name: "due_from", "level", ...
	Value  string
	Reason string
}

func (e *ParamError) Error() string {
	return fmt.Sprintf("invalid %s %q: %s", e.Param, e.Value, e.Reason)
}

func (e *ParamError) Unwrap() error { return ErrBadParam }

// Filter selects schedules. Zero fields select everything; a zero Filter
// selects the pending ones (States empty).
type Filter struct {
	ID, Target, Key string
	// Level is a level number (1-based); 0 any.
	Level int
	// DueFrom (inclusive) and DueTo (exclusive) bound the due time; zero
	// is unbounded.
	DueFrom, DueTo time.Time
	// States are the states wanted; empty means the pending ones
	// (waiting, wheel, due). "all" in ParseFilter means every state.
	States []string
	// Limit bounds the results of a page; 0 is no bound.
	Limit int
	// After is the cursor of the page to return: the next one of an
	// earlier Query ("" for the first page).
	After string
}

// AllStates lists every state, in the order of a schedule's life.
var AllStates = []string{StateWaiting, StateWheel, StateDue, StateCancelled, StateDone, StateInvalid}

func (f Filter) wants(state string) bool {
	if len(f.States) == 0 {
		return Pending(state)
	}
	return slices.Contains(f.States, state)
}

// Parameter names, shared by the HTTP API (query parameters) and the CLI
// (flags, with - for _).
const (
	ParamID      = "id"
	ParamTarget  = "target"
	ParamKey     = "key"
	ParamLevel   = "level"
	ParamDueFrom = "due_from"
	ParamDueTo   = "due_to"
	ParamState   = "state"
	ParamLimit   = "limit"
	ParamCursor  = "cursor"
)

// ParseFilter builds a Filter from named string parameters (get returns ""
// for an absent one), checking each: level 1..levels, due_from and due_to
// RFC 3339 or epoch milliseconds, state a comma list of states or "all",
// limit 0..maxLimit (maxLimit 0: no bound), cursor as returned by Query.
// The error is a *ParamError naming the first bad parameter.
func ParseFilter(get func(name string) string, levelCount, maxLimit int) (Filter, error) {
	f := Filter{ID: get(ParamID), Target: get(ParamTarget), Key: get(ParamKey), After: get(ParamCursor)}
	bad := func(p, v, why string) (Filter, error) { return Filter{}, &ParamError{Param: p, Value: v, Reason: why} }
	if v := get(ParamLevel); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > levelCount {
			return bad(ParamLevel, v, fmt.Sprintf("want a level number 1..%d", levelCount))
		}
		f.Level = n
	}
	for _, p := range []struct {
		name string
		to   *time.Time
	}{{ParamDueFrom, &f.DueFrom}, {ParamDueTo, &f.DueTo}} {
		if v := get(p.name); v != "" {
			t, err := ParseTime(v)
			if err != nil {
				return bad(p.name, v, "want RFC 3339 (2030-01-01T00:00:00Z) or epoch milliseconds")
			}
			*p.to = t
		}
	}
	if !f.DueFrom.IsZero() && !f.DueTo.IsZero() && !f.DueFrom.Before(f.DueTo) {
		return bad(ParamDueTo, get(ParamDueTo), "must lie after due_from")
	}
	if v := get(ParamState); v != "" && v != "all" {
		for s := range strings.SplitSeq(v, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(AllStates, s) {
				return bad(ParamState, v, "want all or a comma list of "+strings.Join(AllStates, ", "))
			}
			f.States = append(f.States, s)
		}
	} else if v == "all" {
		f.States = slices.Clone(AllStates)
	}
	if v := get(ParamLimit); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || (maxLimit > 0 && (n > maxLimit || n == 0)) {
			if maxLimit > 0 {
				return bad(ParamLimit, v, fmt.Sprintf("want 1..%d", maxLimit))
			}
			return bad(ParamLimit, v, "want 0 (all) or more")
		}
		f.Limit = n
	}
	if f.After != "" {
		if _, ok := f.after(); !ok {
			return bad(ParamCursor, f.After, "not a cursor returned by this API")
		}
	}
	return f, nil
}

// ParseTime reads RFC 3339 or epoch milliseconds.
func ParseTime(v string) (time.Time, error) {
	v = strings.TrimSpace(v)
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms >= 0 {
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("schedules: time %q: want RFC 3339 or epoch milliseconds", v)
	}
	return t, nil
}

// cursor is the opaque form of a sort key: base64url of "due.part.offset".
func (a sortKey) cursor() string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d.%d.%d", a.due, a.part, a.offset))
}

func (f Filter) after() (sortKey, bool) {
	if f.After == "" {
		return sortKey{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(f.After)
	if err != nil {
		return sortKey{}, false
	}
	var k sortKey
	if n, err := fmt.Sscanf(string(b), "%d.%d.%d", &k.due, &k.part, &k.offset); err != nil || n != 3 {
		return sortKey{}, false
	}
	return k, true
}
