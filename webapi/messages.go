package webapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/internal/httpapi"
	"github.com/lockstream/lockstream/storage"
)

// InboxStore is the part of inbox.PostgresStore the inbox, free-form notification
// and stream routes use.
type InboxStore interface {
	ListInbox(ctx context.Context, q inbox.Query) (int, []inbox.Message, error)
	GetInboxMessage(ctx context.Context, memberID, id string) (inbox.Message, error)
	MarkInbox(ctx context.Context, memberID string, action inbox.Action, ids []string, all bool) (int, error)
	MarkAllInbox(ctx context.Context, memberID string, action inbox.Action, typ string) (int, error)
	RecordNotification(ctx context.Context, n inbox.FreeFormNotification) (inbox.RecordedNotification, error)
	GetInboxState(ctx context.Context, memberID string) (inbox.State, error)
	AckInbox(ctx context.Context, memberID string, seq int64) error
	InboxAfter(ctx context.Context, cursors []inbox.Cursor) ([][]inbox.Message, error)
	ListenInbox(ctx context.Context, ready func(), notice func(inbox.News)) error
}

// sensorRef is a message's sensor.
type sensorRef struct {
	ID      string `json:"id"`
	Address string `json:"address"`
}

// messageBody is an inbox message as the API (and the stream) shows it.
type messageBody struct {
	ID       string          `json:"id"`
	Seq      int64           `json:"seq"`
	Type     string          `json:"type"`
	Sensor   *sensorRef      `json:"sensor"`
	Data     *int            `json:"data"`
	Previous *int            `json:"previous"`
	At       time.Time       `json:"at"`
	Severity string          `json:"severity"`
	Seen     bool            `json:"seen"`
	SeenAt   *time.Time      `json:"seen_at"`
	Cause    string          `json:"cause"`
	Subject  string          `json:"subject"`
	Message  json.RawMessage `json:"message"`
	// LostSince and SilentSeconds: a connection_restored's outage.
	LostSince     *time.Time `json:"lost_since,omitempty"`
	SilentSeconds *int64     `json:"silent_seconds,omitempty"`
}

func renderMessage(m inbox.Message) messageBody {
	body := messageBody{
		ID: m.ID, Seq: m.Seq, Type: m.Type, Data: m.Data, Previous: m.Previous, At: m.At.UTC(),
		Severity: m.Severity, Seen: m.SeenAt != nil, Cause: m.Cause,
	}
	body.Subject, body.Message = m.Describe()
	if lostSince, silent, ok := m.Outage(); ok {
		at := lostSince.UTC()
		body.LostSince, body.SilentSeconds = &at, &silent
	}
	if m.SeenAt != nil {
		at := m.SeenAt.UTC()
		body.SeenAt = &at
	}
	if m.SensorID != "" {
		body.Sensor = &sensorRef{ID: m.SensorID, Address: m.SensorAddress}
	}
	return body
}

// messagesBody is the answer of GET /v1/messages; Messages is absent with
// count-only.
type messagesBody struct {
	Total    int            `json:"total"`
	Messages *[]messageBody `json:"messages,omitempty"`
}

// messagesParameters are the query parameters GET /v1/messages knows; any other
// is a 400, so that a typo is not silently ignored.
var messagesParameters = []string{"limit", "offset", "seen", "sort-field", "sort-dir", "message-type", "count-only", "user"}

// parseMessagesQuery reads and validates GET /v1/messages's parameters, naming
// the first bad one in a 400.
func parseMessagesQuery(r *http.Request, memberID string) (inbox.Query, error) {
	q := inbox.Query{MemberID: memberID, Sort: inbox.SortTimestamp, Descending: true, Limit: maxLimit}
	values := r.URL.Query()
	for name, v := range values {
		if !slices.Contains(messagesParameters, name) {
			return q, httpapi.InvalidParameter("unknown parameter %q: GET /v1/messages takes %s", name, strings.Join(messagesParameters, ", "))
		}
		if len(v) != 1 {
			return q, httpapi.InvalidParameter("%s is given %d times; give it once", name, len(v))
		}
	}
	var err error
	if raw := values.Get("limit"); raw != "" {
		n, perr := strconv.Atoi(raw)
		if perr != nil || n < 1 || n > maxLimit {
			return q, httpapi.InvalidParameter("limit must be an integer from 1 to %d, got %q", maxLimit, raw)
		}
		q.Limit = n
	}
	if raw := values.Get("offset"); raw != "" {
		n, perr := strconv.Atoi(raw)
		if perr != nil || n < 0 {
			return q, httpapi.InvalidParameter("offset must be an integer of 0 or more, got %q", raw)
		}
		q.Offset = n
	}
	if q.IncludeSeen, err = boolParameter(values, "seen"); err != nil {
		return q, err
	}
	if q.CountOnly, err = boolParameter(values, "count-only"); err != nil {
		return q, err
	}
	switch raw := values.Get("sort-field"); raw {
	case "":
	case string(inbox.SortTimestamp), string(inbox.SortType), string(inbox.SortSensor):
		q.Sort = inbox.Sort(raw)
	default:
		return q, httpapi.InvalidParameter("sort-field must be timestamp, type or sensor, got %q", raw)
	}
	switch raw := values.Get("sort-dir"); raw {
	case "", "desc":
	case "asc":
		q.Descending = false
	default:
		return q, httpapi.InvalidParameter("sort-dir must be asc or desc, got %q", raw)
	}
	if raw, ok := values["message-type"]; ok {
		if !inbox.ValidMessageType(raw[0]) {
			return q, httpapi.InvalidParameter("message-type must be a message type (1 to 64 letters, digits, '_' or '-'), got %q", raw[0])
		}
		q.Type = raw[0]
	}
	return q, nil
}

// boolParameter reads a true/false parameter; absent is false.
func boolParameter(values map[string][]string, name string) (bool, error) {
	raw, ok := values[name]
	if !ok {
		return false, nil
	}
	switch raw[0] {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, httpapi.InvalidParameter("%s must be true or false, got %q", name, raw[0])
}

// listMessages handles GET /v1/messages: the acting member's messages, with
// total counting every match (not the page).
func (s *Server) listMessages(w http.ResponseWriter, r *http.Request) error {
	if s.inbox == nil {
		return membersDisabled()
	}
	q, err := parseMessagesQuery(r, actingMember(r))
	if err != nil {
		return err
	}
	total, messages, err := s.inbox.ListInbox(r.Context(), q)
	if err != nil {
		return fmt.Errorf("listing messages: %w", err)
	}
	body := messagesBody{Total: total}
	if !q.CountOnly {
		rendered := make([]messageBody, 0, len(messages))
		for _, m := range messages {
			rendered = append(rendered, renderMessage(m))
		}
		body.Messages = &rendered
	}
	return httpapi.WriteJSON(w, http.StatusOK, body)
}

// messageFromPath returns the {id} of the route, or a 404 when it cannot name a
// message.
func messageFromPath(r *http.Request) (string, error) {
	id := chi.URLParam(r, "id")
	if uuid.Validate(id) != nil {
		return "", httpapi.NotFound("message %q not found: a message id is a UUID", id)
	}
	return id, nil
}

// onlyUserParameter refuses any query parameter but user on the routes of one
// message.
func onlyUserParameter(r *http.Request) error {
	for name := range r.URL.Query() {
		if name != "user" {
			return httpapi.InvalidParameter("unknown parameter %q", name)
		}
	}
	return nil
}

// getMessage handles GET /v1/messages/{id}. Another member's message is a 404,
// as is a deleted one.
func (s *Server) getMessage(w http.ResponseWriter, r *http.Request) error {
	if s.inbox == nil {
		return membersDisabled()
	}
	id, err := messageFromPath(r)
	if err != nil {
		return err
	}
	if err := onlyUserParameter(r); err != nil {
		return err
	}
	m, err := s.inbox.GetInboxMessage(r.Context(), actingMember(r), id)
	if errors.Is(err, storage.ErrNotFound) {
		return httpapi.NotFound("message %q not found", id)
	}
	if err != nil {
		return fmt.Errorf("getting message: %w", err)
	}
	return httpapi.WriteJSON(w, http.StatusOK, renderMessage(m))
}

// markMessage handles POST /v1/messages/{id}/seen and /unseen and DELETE
// /v1/messages/{id}: 204, or 404 for a message the member does not have.
func (s *Server) markMessage(action inbox.Action) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		if s.inbox == nil {
			return membersDisabled()
		}
		id, err := messageFromPath(r)
		if err != nil {
			return err
		}
		if err := onlyUserParameter(r); err != nil {
			return err
		}
		n, err := s.inbox.MarkInbox(r.Context(), actingMember(r), action, []string{id}, false)
		if err != nil {
			return fmt.Errorf("marking message %s: %w", action, err)
		}
		if n == 0 {
			return httpapi.NotFound("message %q not found", id)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

// maxBulkIDs bounds the ids of one bulk request; all_notifications covers more.
const maxBulkIDs = 1000

// markMessages handles POST /v1/messages/seen and /delete: the messages ids, or
// every message of the member with all_notifications (ids are then ignored), in
// one statement. Ids the member does not have are skipped.
func (s *Server) markMessages(action inbox.Action) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		if s.inbox == nil {
			return membersDisabled()
		}
		if err := onlyUserParameter(r); err != nil {
			return err
		}
		var req struct {
			IDs              []string `json:"ids"`
			AllNotifications bool     `json:"all_notifications"`
		}
		if err := s.decodeJSON(w, r, &req); err != nil {
			return err
		}
		if !req.AllNotifications {
			var errs httpapi.FieldErrors
			switch {
			case len(req.IDs) == 0:
				errs.Add("ids", "give the message ids, or all_notifications: true")
			case len(req.IDs) > maxBulkIDs:
				errs.Add("ids", "at most %d ids; all_notifications covers every message", maxBulkIDs)
			}
			for i, id := range req.IDs {
				if uuid.Validate(id) != nil {
					errs.Add(fmt.Sprintf("ids[%d]", i), "must be a message id (a UUID), got %q", id)
				}
			}
			if err := errs.Err(); err != nil {
				return err
			}
		}
		if _, err := s.inbox.MarkInbox(r.Context(), actingMember(r), action, req.IDs, req.AllNotifications); err != nil {
			return fmt.Errorf("marking messages %s: %w", action, err)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

// notificationRequest is a free-form notification as POST /v1/notifications
// takes it.
type notificationRequest struct {
	ClientID string          `json:"client_id"`
	MemberID string          `json:"member_id"`
	Type     string          `json:"type"`
	Subject  string          `json:"subject"`
	Message  json.RawMessage `json:"message"`
	Email    bool            `json:"email"`
}

// notificationRecorded is the answer of POST /v1/notifications.
type notificationRecorded struct {
	// Messages is the number of inbox messages added, one per member reached.
	Messages int `json:"messages"`
	// Emails is the number of emails queued (members with an address, when email
	// was asked for).
	Emails int `json:"emails"`
}

// createNotification handles POST /v1/notifications (admin): a free-form
// notification into the inbox of a member or of every member of a client,
// recorded before the 202.
func (s *Server) createNotification(w http.ResponseWriter, r *http.Request) error {
	if s.inbox == nil {
		return membersDisabled()
	}
	var req notificationRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	return s.recordNotification(w, r, inbox.FreeFormNotification{ClientID: req.ClientID, MemberID: req.MemberID,
		Type: req.Type, Subject: req.Subject, Message: req.Message, Email: req.Email})
}

// recordNotification checks n and records it into the inboxes it addresses,
// answering 202 with what it made.
func (s *Server) recordNotification(w http.ResponseWriter, r *http.Request, n inbox.FreeFormNotification) error {
	recorded, err := s.storeNotification(r.Context(), n)
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusAccepted, recorded)
}

// storeNotification checks n and records it into the inboxes it addresses.
func (s *Server) storeNotification(ctx context.Context, n inbox.FreeFormNotification) (notificationRecorded, error) {
	var errs httpapi.FieldErrors
	for _, fe := range n.Check() {
		errs.Add(fe.Field, "%s", fe.Detail)
	}
	if err := errs.Err(); err != nil {
		return notificationRecorded{}, err
	}
	recorded, err := s.inbox.RecordNotification(ctx, n)
	if errors.Is(err, storage.ErrNotFound) {
		if n.MemberID != "" {
			return notificationRecorded{}, memberNotFound(n.MemberID)
		}
		return notificationRecorded{}, clientNotFound(n.ClientID)
	}
	if err != nil {
		return notificationRecorded{}, fmt.Errorf("recording a notification: %w", err)
	}
	return notificationRecorded{Messages: recorded.Messages, Emails: recorded.Emails}, nil
}
