package console

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/google/uuid"

	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/storage"
)

// maxInboxOffset bounds how deep the inbox page goes by offset: the inbox API's
// own limit on a listing, so a page costs what the API's would.
const maxInboxOffset = 100_000

// inboxData is a member's inbox page.
type inboxData struct {
	Messages []inbox.Message
	// Total counts the member's messages (seen ones included); Unseen the others.
	Total, Unseen int
	Offset        int
	// Next and Prev are the offsets of the neighbouring pages; -1 when none.
	Next, Prev int
}

// inbox lists the signed-in member's messages, newest first, seen ones too,
// each unseen one with a mark-seen button.
func (c *Console) inbox(w http.ResponseWriter, r *http.Request, s *session) error {
	if c.deps.Inbox == nil {
		return errorf(http.StatusNotFound, "There is no inbox here.")
	}
	offset := 0
	if raw := r.URL.Query().Get("offset"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 || n > maxInboxOffset {
			return errorf(http.StatusBadRequest, "That is not a page of the inbox.")
		}
		offset = n
	}
	ctx := r.Context()
	d := inboxData{Offset: offset, Next: -1, Prev: -1}
	var err error
	d.Total, d.Messages, err = c.deps.Inbox.ListInbox(ctx, inbox.Query{MemberID: s.Subject, IncludeSeen: true,
		Sort: inbox.SortTimestamp, Descending: true, Limit: c.cfg.PageSize, Offset: offset})
	if err != nil {
		return err
	}
	if d.Unseen, _, err = c.deps.Inbox.ListInbox(ctx, inbox.Query{MemberID: s.Subject,
		Sort: inbox.SortTimestamp, CountOnly: true}); err != nil {
		return err
	}
	if offset+len(d.Messages) < d.Total {
		d.Next = offset + len(d.Messages)
	}
	if offset > 0 {
		d.Prev = max(0, offset-c.cfg.PageSize)
	}
	flash := ""
	if id := r.URL.Query().Get("seen"); id != "" && uuid.Validate(id) == nil {
		flash = "Message " + id + " is marked seen."
	}
	c.render(w, r, http.StatusOK, "inbox", view{Title: "Inbox", Active: "inbox", Session: s, Flash: flash, Data: d})
	return nil
}

// markSeen marks one of the member's messages seen and goes back to the inbox
// page it was on. Another member's message is not found, as in the API.
func (c *Console) markSeen(w http.ResponseWriter, r *http.Request, s *session) error {
	if c.deps.Inbox == nil {
		return errorf(http.StatusNotFound, "There is no inbox here.")
	}
	id := r.PathValue("id")
	if uuid.Validate(id) != nil {
		return storage.ErrNotFound
	}
	n, err := c.deps.Inbox.MarkInbox(r.Context(), s.Subject, inbox.ActionSeen, []string{id}, false)
	if err != nil {
		return err
	}
	if n == 0 {
		return storage.ErrNotFound
	}
	back := "/console/inbox?seen=" + id
	if offset, err := strconv.Atoi(r.PostFormValue("offset")); err == nil && offset > 0 && offset <= maxInboxOffset {
		back += "&offset=" + strconv.Itoa(offset)
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
	return nil
}

// home is /console/: the fleet for the admin, the inbox for a member.
func (c *Console) home(w http.ResponseWriter, r *http.Request, s *session) error {
	if s.Role == roleMember {
		http.Redirect(w, r, "/console/inbox", http.StatusSeeOther)
		return nil
	}
	if s.Role != roleAdmin {
		return errors.New("console: a session of no known role")
	}
	return c.fleet(w, r, s)
}
