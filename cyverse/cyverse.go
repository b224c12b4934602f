// Package cyverse serves the CyVerse notification API v1 for the clients of the
// public cyverse-de/notification-agent: its paths, parameters and bodies, at the
// root, over the members' inboxes (docs/DESIGN.md "CyVerse notification API
// v1"). Its semantics are the agent's, not v2's: parameter names in any case,
// unknown parameters ignored, an unknown user has no messages, unknown or
// already handled ids are no-ops, and totals and some counts are strings.
// webapi mounts it behind its own authentication.
package cyverse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/internal/httpapi"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// Inbox reads and marks members' messages.
type Inbox interface {
	ListInbox(ctx context.Context, q inbox.Query) (int, []inbox.Message, error)
	MarkInbox(ctx context.Context, memberID string, action inbox.Action, ids []string, all bool) (int, error)
	MarkAllInbox(ctx context.Context, memberID string, action inbox.Action, typ string) (int, error)
}

// Members finds a member by its username or id.
type Members interface {
	MemberByUser(ctx context.Context, user string) (registry.Member, error)
}

// API holds the v1 handlers' dependencies.
type API struct {
	// Inbox and Members serve the messages; when either is nil every route
	// answers Disabled.
	Inbox   Inbox
	Members Members
	// Disabled is the error answered without a member store.
	Disabled error
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes int64
	// Describe is how a message reads to a person, as v2 shows it: its
	// subject, and its message (a JSON string, or a free-form notification's
	// message as it was sent).
	Describe func(inbox.Message) (subject string, message json.RawMessage)
}

// Handler is a handler that reports failure by returning an error; the
// caller's adapter writes problems as they are and logs anything else.
type Handler func(w http.ResponseWriter, r *http.Request) error

// Routes declares the agent's eight routes on r, each adapted by handle.
func (a *API) Routes(r chi.Router, handle func(Handler) http.HandlerFunc) {
	r.Get("/messages", handle(a.v1Messages))
	r.Get("/unseen-messages", handle(a.v1UnseenMessages))
	r.Get("/last-ten-messages", handle(a.v1LastTen))
	r.Get("/count-messages", handle(a.v1CountMessages))
	r.Post("/seen", handle(a.v1Seen))
	r.Post("/mark-all-seen", handle(a.v1MarkAllSeen))
	r.Post("/delete", handle(a.v1Delete))
	r.Delete("/delete-all", handle(a.v1DeleteAll))
}

// v1Message is a message as the agent shows it (its reformat-message).
type v1Message struct {
	Deleted bool            `json:"deleted"`
	Message v1MessageText   `json:"message"`
	Payload json.RawMessage `json:"payload"`
	Seen    bool            `json:"seen"`
	Subject string          `json:"subject"`
	Type    string          `json:"type"`
	User    string          `json:"user"`
}

// v1MessageText is a message's "message" object; Timestamp is in milliseconds.
type v1MessageText struct {
	ID        string `json:"id"`
	Text      string `json:"text"`
	Timestamp int64  `json:"timestamp"`
}

// v1MessageList answers GET /messages, /unseen-messages and /last-ten-messages.
type v1MessageList struct {
	Messages []v1Message `json:"messages"`
	Total    string      `json:"total"`
}

// v1Counts answers GET /count-messages. lockstream has no system messages: their
// counts are always 0.
type v1Counts struct {
	UserTotal         int `json:"user-total"`
	SystemTotal       int `json:"system-total"`
	SystemTotalNew    int `json:"system-total-new"`
	SystemTotalUnseen int `json:"system-total-unseen"`
}

// v1Unseen answers POST /seen and /mark-all-seen: the unseen messages left.
type v1Unseen struct {
	Success bool `json:"success"`
	Count   int  `json:"count"`
}

// v1Deleted answers DELETE /delete-all: the unseen messages left, as a string.
type v1Deleted struct {
	Success bool   `json:"success"`
	Count   string `json:"count"`
}

// v1Success answers POST /delete.
type v1Success struct {
	Success bool `json:"success"`
}

// v1Params are a request's query parameters by lower-cased name, as the agent
// reads them (sortField and sortfield are one); a repeated one counts once.
type v1Params map[string]string

func v1Query(r *http.Request) v1Params {
	p := v1Params{}
	for name, values := range r.URL.Query() {
		p[strings.ToLower(name)] = values[0]
	}
	return p
}

// user returns the required user parameter.
func (p v1Params) user() (string, error) {
	if strings.TrimSpace(p["user"]) == "" {
		return "", httpapi.InvalidParameter("user is required: a member's username or id")
	}
	return p["user"], nil
}

// count reads limit or offset: an integer, where 0 or less means none.
func (p v1Params) count(name string) (int, error) {
	raw, ok := p[name]
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil {
		return 0, httpapi.InvalidParameter("%s must be an integer, got %q", name, raw)
	}
	return max(n, 0), nil
}

// applySeen applies seen (only seen when "true", only unseen otherwise, both
// when absent) to q.
func (p v1Params) applySeen(q *inbox.Query) {
	raw, ok := p["seen"]
	switch {
	case !ok:
		q.IncludeSeen = true
	case strings.EqualFold(raw, "true"):
		q.SeenOnly = true
	}
}

// applyFilter applies filter to q the agent's way: lower-cased, spaces as
// underscores; "new" keeps the unseen messages of every type.
func (p v1Params) applyFilter(q *inbox.Query) {
	raw, ok := p["filter"]
	if !ok {
		return
	}
	if typ := v1Type(raw); typ == "new" {
		q.IncludeSeen, q.SeenOnly = false, false
	} else {
		q.Type = typ
	}
}

// v1Type is a filter or type as the agent matches it.
func v1Type(raw string) string { return strings.ToLower(strings.ReplaceAll(raw, " ", "_")) }

// v1Sorts maps sortField to the inbox's sort fields; date_created is timestamp.
var v1Sorts = map[string]inbox.Sort{
	"timestamp":    inbox.SortTimestamp,
	"date_created": inbox.SortTimestamp,
	"uuid":         inbox.SortID,
	"subject":      inbox.SortSubject,
	"type":         inbox.SortType,
}

// applySort applies sortField (default timestamp) and sortDir (default desc).
func (p v1Params) applySort(q *inbox.Query) error {
	q.Sort, q.Descending = inbox.SortTimestamp, true
	if raw, ok := p["sortfield"]; ok {
		sort, known := v1Sorts[strings.ToLower(raw)]
		if !known {
			return httpapi.InvalidParameter("sortField must be timestamp, date_created, uuid, subject or type, got %q", raw)
		}
		q.Sort = sort
	}
	switch raw := p["sortdir"]; strings.ToLower(raw) {
	case "", "desc":
	case "asc":
		q.Descending = false
	default:
		return httpapi.InvalidParameter("sortDir must be asc or desc, got %q", raw)
	}
	return nil
}

// v1Member finds the member user names (username or id); ok is false for none,
// which the agent answers as a user without messages.
func (a *API) v1Member(r *http.Request, user string) (m registry.Member, ok bool, err error) {
	if a.Members == nil || a.Inbox == nil {
		return registry.Member{}, false, a.Disabled
	}
	m, err = a.Members.MemberByUser(r.Context(), user)
	if errors.Is(err, storage.ErrNotFound) {
		return registry.Member{}, false, nil
	}
	if err != nil {
		return registry.Member{}, false, fmt.Errorf("finding user %q: %w", user, err)
	}
	return m, true, nil
}

// v1List answers a message list: the page q selects, with every match's count.
func (a *API) v1List(w http.ResponseWriter, r *http.Request, user string, q inbox.Query, ascending bool) error {
	m, ok, err := a.v1Member(r, user)
	if err != nil || !ok {
		return v1Empty(w, err)
	}
	q.MemberID = m.ID
	total, messages, err := a.Inbox.ListInbox(r.Context(), q)
	if err != nil {
		return fmt.Errorf("listing messages: %w", err)
	}
	if ascending {
		slices.Reverse(messages)
	}
	body := v1MessageList{Messages: make([]v1Message, 0, len(messages)), Total: strconv.Itoa(total)}
	for _, msg := range messages {
		body.Messages = append(body.Messages, a.renderV1Message(msg, v1UserName(m)))
	}
	return httpapi.WriteJSON(w, http.StatusOK, body)
}

// v1Empty answers err, or the list of a user that has no messages.
func v1Empty(w http.ResponseWriter, err error) error {
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, v1MessageList{Messages: []v1Message{}, Total: "0"})
}

// v1UserName is how v1 names a member: its username, or its id without one.
func v1UserName(m registry.Member) string {
	if m.Username != "" {
		return m.Username
	}
	return m.ID
}

// renderV1Message shows m as the agent would: the id upper-cased (as the agent
// prints its UUIDs), underscores of the type as spaces, the text being a
// free-form notification's message when it is a string (else its subject) or a
// sensor event's sentence, and the payload a free-form notification's message
// when it is an object, or a sensor event's facts.
func (a *API) renderV1Message(m inbox.Message, user string) v1Message {
	subject, message := a.Describe(m)
	out := v1Message{
		Message: v1MessageText{ID: strings.ToUpper(m.ID), Text: subject, Timestamp: m.At.UnixMilli()},
		Payload: json.RawMessage("{}"),
		Seen:    m.SeenAt != nil,
		Subject: subject,
		Type:    strings.ReplaceAll(m.Type, "_", " "),
		User:    user,
	}
	var text string
	if json.Unmarshal(message, &text) == nil && string(message) != "null" {
		out.Message.Text = text
	}
	switch {
	case m.SensorID != "":
		payload, _ := json.Marshal(map[string]any{ // maps, ints and strings always encode
			"sensor_id": m.SensorID, "address": m.SensorAddress, "data": m.Data, "previous": m.Previous,
			"severity": m.Severity,
		})
		out.Payload = payload
	case strings.HasPrefix(strings.TrimSpace(string(message)), "{"):
		out.Payload = message
	}
	return out
}

// v1Messages handles GET /messages: limit (0, the default, for all), offset,
// seen, sortField, sortDir and filter, as the agent takes them.
func (a *API) v1Messages(w http.ResponseWriter, r *http.Request) error {
	p := v1Query(r)
	user, err := p.user()
	if err != nil {
		return err
	}
	var q inbox.Query
	if q.Limit, err = p.count("limit"); err != nil {
		return err
	}
	if q.Offset, err = p.count("offset"); err != nil {
		return err
	}
	if err := p.applySort(&q); err != nil {
		return err
	}
	p.applySeen(&q)
	p.applyFilter(&q)
	return a.v1List(w, r, user, q, false)
}

// v1UnseenMessages handles GET /unseen-messages: every unseen message, oldest
// first.
func (a *API) v1UnseenMessages(w http.ResponseWriter, r *http.Request) error {
	user, err := v1Query(r).user()
	if err != nil {
		return err
	}
	return a.v1List(w, r, user, inbox.Query{Sort: inbox.SortTimestamp}, false)
}

// v1LastTen handles GET /last-ten-messages: the ten newest messages, seen or
// not, oldest first; total counts them all.
func (a *API) v1LastTen(w http.ResponseWriter, r *http.Request) error {
	user, err := v1Query(r).user()
	if err != nil {
		return err
	}
	return a.v1List(w, r, user, inbox.Query{Sort: inbox.SortTimestamp, Descending: true, Limit: 10,
		IncludeSeen: true}, true)
}

// v1CountMessages handles GET /count-messages: the user's messages matching seen
// and filter.
func (a *API) v1CountMessages(w http.ResponseWriter, r *http.Request) error {
	p := v1Query(r)
	user, err := p.user()
	if err != nil {
		return err
	}
	m, ok, err := a.v1Member(r, user)
	if err != nil {
		return err
	}
	var counts v1Counts
	if ok {
		q := inbox.Query{MemberID: m.ID, Sort: inbox.SortTimestamp, CountOnly: true}
		p.applySeen(&q)
		p.applyFilter(&q)
		if counts.UserTotal, _, err = a.Inbox.ListInbox(r.Context(), q); err != nil {
			return fmt.Errorf("counting messages: %w", err)
		}
	}
	return httpapi.WriteJSON(w, http.StatusOK, counts)
}

// v1UUIDs is the body of POST /seen and /delete.
type v1UUIDs struct {
	UUIDs *[]string `json:"uuids"`
}

// decodeV1UUIDs reads {"uuids":[…]}, the list required; other fields are
// ignored, as the agent does.
func (a *API) decodeV1UUIDs(w http.ResponseWriter, r *http.Request) ([]string, error) {
	var body v1UUIDs
	if err := a.decodeV1(w, r, &body); err != nil {
		return nil, err
	}
	if body.UUIDs == nil {
		var errs httpapi.FieldErrors
		errs.Add("uuids", "is required: a list of message ids")
		return nil, errs.Err()
	}
	return *body.UUIDs, nil
}

// decodeV1 reads one JSON object into dst, at most MaxBodyBytes; unlike v2 it
// ignores unknown fields, which the agent's clients may send.
func (a *API) decodeV1(w http.ResponseWriter, r *http.Request, dst any) error {
	r.Body = http.MaxBytesReader(w, r.Body, a.MaxBodyBytes)
	if err := json.NewDecoder(r.Body).Decode(dst); err != nil {
		if errors.Is(err, io.EOF) {
			return httpapi.MalformedBody("the body is empty; a JSON object is required")
		}
		return httpapi.DecodeProblem(err, a.MaxBodyBytes)
	}
	return nil
}

// v1Seen handles POST /seen?user=: the ids given are seen; unknown, other
// users' and already seen ids are no-ops. It answers the unseen messages left.
func (a *API) v1Seen(w http.ResponseWriter, r *http.Request) error {
	user, err := v1Query(r).user()
	if err != nil {
		return err
	}
	ids, err := a.decodeV1UUIDs(w, r)
	if err != nil {
		return err
	}
	return a.v1MarkSeen(w, r, user, func(memberID string) error {
		_, err := a.Inbox.MarkInbox(r.Context(), memberID, inbox.ActionSeen, ids, false)
		return err
	})
}

// v1MarkAllSeen handles POST /mark-all-seen {"user"}: every message of the user
// is seen, or every one of "type" when the body has one. It answers the unseen
// messages left.
func (a *API) v1MarkAllSeen(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		User string `json:"user"`
		Type string `json:"type"`
	}
	if err := a.decodeV1(w, r, &body); err != nil {
		return err
	}
	if strings.TrimSpace(body.User) == "" {
		var errs httpapi.FieldErrors
		errs.Add("user", "is required: a member's username or id")
		return errs.Err()
	}
	return a.v1MarkSeen(w, r, body.User, func(memberID string) error {
		_, err := a.Inbox.MarkAllInbox(r.Context(), memberID, inbox.ActionSeen, v1Type(body.Type))
		return err
	})
}

// v1MarkSeen runs mark for user's member, if any, and answers its unseen count.
func (a *API) v1MarkSeen(w http.ResponseWriter, r *http.Request, user string, mark func(memberID string) error) error {
	m, ok, err := a.v1Member(r, user)
	if err != nil {
		return err
	}
	body := v1Unseen{Success: true}
	if ok {
		if err := mark(m.ID); err != nil {
			return fmt.Errorf("marking messages seen: %w", err)
		}
		if body.Count, err = a.v1UnseenCount(r, m.ID); err != nil {
			return err
		}
	}
	return httpapi.WriteJSON(w, http.StatusOK, body)
}

// v1UnseenCount counts the member's unseen messages.
func (a *API) v1UnseenCount(r *http.Request, memberID string) (int, error) {
	n, _, err := a.Inbox.ListInbox(r.Context(), inbox.Query{MemberID: memberID, Sort: inbox.SortTimestamp,
		CountOnly: true})
	if err != nil {
		return 0, fmt.Errorf("counting unseen messages: %w", err)
	}
	return n, nil
}

// v1Delete handles POST /delete?user=: the ids given are deleted; unknown,
// other users' and already deleted ids are no-ops.
func (a *API) v1Delete(w http.ResponseWriter, r *http.Request) error {
	user, err := v1Query(r).user()
	if err != nil {
		return err
	}
	ids, err := a.decodeV1UUIDs(w, r)
	if err != nil {
		return err
	}
	m, ok, err := a.v1Member(r, user)
	if err != nil {
		return err
	}
	if ok {
		if _, err := a.Inbox.MarkInbox(r.Context(), m.ID, inbox.ActionDelete, ids, false); err != nil {
			return fmt.Errorf("deleting messages: %w", err)
		}
	}
	return httpapi.WriteJSON(w, http.StatusOK, v1Success{Success: true})
}

// v1DeleteAll handles DELETE /delete-all?user=: every message of the user is
// deleted, or every one of filter's type. It answers the unseen messages left,
// as a string.
func (a *API) v1DeleteAll(w http.ResponseWriter, r *http.Request) error {
	p := v1Query(r)
	user, err := p.user()
	if err != nil {
		return err
	}
	m, ok, err := a.v1Member(r, user)
	if err != nil {
		return err
	}
	left := 0
	if ok {
		var q inbox.Query
		p.applyFilter(&q) // "new" deletes every type, as the agent's get-filter drops it
		if _, err := a.Inbox.MarkAllInbox(r.Context(), m.ID, inbox.ActionDelete, q.Type); err != nil {
			return fmt.Errorf("deleting messages: %w", err)
		}
		if left, err = a.v1UnseenCount(r, m.ID); err != nil {
			return err
		}
	}
	return httpapi.WriteJSON(w, http.StatusOK, v1Deleted{Success: true, Count: strconv.Itoa(left)})
}
