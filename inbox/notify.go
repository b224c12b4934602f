package inbox

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// An Channel payload is one of two kinds:
//
//   - the messages themselves: a JSON object {"m": the fields the messages share,
//     "u": member ids, "q": their seqs, "i": their message ids (none when they
//     share it: "m" has it)}, for the messages
//     one notification (or free-form notification) put in several inboxes. A
//     listener serves its streams from it without reading the inbox.
//   - pointers: "<member id>:<newest seq>" pairs, comma-separated, when the shared
//     fields are too large for a payload (a long free-form message) or from the
//     backfill. A listener reads what they point at.
//
// Either way a payload stays under Postgres's 8000-byte limit; a write for many
// members sends several.
const (
	// payloadLimit is the most bytes of one payload (Postgres refuses 8000).
	payloadLimit = 7900
	// payloadSharedLimit is the most bytes of the shared fields carried with the
	// messages; beyond it, pointers are sent.
	payloadSharedLimit = 3000
)

// payloadMessage is the part of a message its inboxes share.
type payloadMessage struct {
	ClientID      string          `json:"c"`
	Type          string          `json:"t"`
	SensorID      string          `json:"s,omitempty"`
	SensorAddress string          `json:"a,omitempty"`
	SensorSite    string          `json:"ss,omitempty"`
	Data          *int            `json:"d,omitempty"`
	Previous      *int            `json:"p,omitempty"`
	At            time.Time       `json:"at"`
	Severity      string          `json:"v"`
	Cause         string          `json:"k"`
	Subject       string          `json:"j,omitempty"`
	Message       json.RawMessage `json:"g,omitempty"`
	CreatedAt     time.Time       `json:"ca"`
	// ID is the messages' id when they share it; the payload then has no "i".
	ID string `json:"id,omitempty"`
	// SharedID is the id of the shared message whose members' copies these
	// are (see "Shared messages"): each copy's id is derived from it and the
	// member's (MemberMessageID), by whoever reads the payload, so the payload
	// carries no "i" (59 bytes a member instead of 98: 10,000 members fit 75
	// payloads, not 125). A listener that does not know the field finds no id
	// and skips the payload, then reads what it missed.
	SharedID string `json:"sid,omitempty"`
}

// inboxPayload is a payload that carries messages.
type inboxPayload struct {
	Shared  payloadMessage `json:"m"`
	Members []string       `json:"u"`
	Seqs    []int64        `json:"q"`
	IDs     []string       `json:"i,omitempty"`
}

// News is what one Channel payload says.
type News struct {
	// Messages are new messages, whole.
	Messages []Message
	// Pointers say that a member's inbox reached a seq.
	Pointers []Notice
}

// Notice says that the member's inbox reached seq Seq.
type Notice struct {
	MemberID string
	Seq      int64
}

// Notify announces added (ordered by notification, then member, as
// WriteRows returns them) on Channel in one statement of the writing transaction
// tx: delivered only on commit.
func Notify(ctx context.Context, tx pgx.Tx, added []Added) error {
	payloads := inboxPayloads(added)
	if len(payloads) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT count(pg_notify('`+Channel+`', p)) FROM unnest($1::text[]) AS p`,
		payloads); err != nil {
		return fmt.Errorf("announcing inbox messages: %w", err)
	}
	return nil
}

// inboxPayloads packs messages into payloads: each run of messages of one
// notification into message payloads, or pointer payloads when what they share
// is too large.
func inboxPayloads(added []Added) []string {
	var groups [][]Added
	for start := 0; start < len(added); {
		end := start + 1
		for end < len(added) && added[end].notification == added[start].notification {
			end++
		}
		groups = append(groups, added[start:end])
		start = end
	}
	// Each member's messages in seq order, so a listener can queue each right
	// after the one before: a client's notifications reach all its members, so
	// the seqs of its first member (the smallest id: rows are in member order)
	// order its groups.
	slices.SortStableFunc(groups, func(a, b []Added) int {
		return cmp.Or(strings.Compare(a[0].ClientID, b[0].ClientID), cmp.Compare(a[0].Seq, b[0].Seq))
	})
	var (
		out      []string
		pointers []string
	)
	for _, group := range groups {
		first := group[0]
		shared := payloadMessage{ClientID: first.ClientID, Type: first.Type, SensorID: first.SensorID,
			SensorAddress: first.SensorAddress, SensorSite: first.SensorSite, Data: first.Data, Previous: first.Previous, At: first.At,
			Severity: first.Severity, Cause: first.Cause, Subject: first.Subject, Message: first.Message.Message,
			CreatedAt: first.CreatedAt}
		sharedJSON, err := json.Marshal(shared)
		if err != nil || len(sharedJSON) > payloadSharedLimit || first.notification == "" && !sameFreeForm(group) {
			for _, m := range group {
				pointers = append(pointers, m.MemberID+":"+strconv.FormatInt(m.Seq, 10))
			}
			continue
		}
		// Per member: two quoted UUIDs with their commas (78 bytes) and a seq
		// with its comma (up to 20): at most 98 bytes. (80 overflowed Postgres's
		// 8000-byte limit once seqs reached two digits with ~100 members.) One
		// UUID less when the messages share their id, or derive it from a
		// shared message's.
		perMember := 98
		switch {
		case first.sharedID != "" && sameShared(group):
			shared.SharedID = first.sharedID
			perMember = 59
		case sameID(group):
			shared.ID = first.ID
			perMember = 59
		}
		per := max(1, (payloadLimit-len(sharedJSON)-100)/perMember)
		for len(group) > 0 {
			n := min(per, len(group))
			p := inboxPayload{Shared: shared}
			for _, m := range group[:n] {
				p.Members = append(p.Members, m.MemberID)
				p.Seqs = append(p.Seqs, m.Seq)
				if shared.ID == "" && shared.SharedID == "" {
					p.IDs = append(p.IDs, m.ID)
				}
			}
			group = group[n:]
			encoded, _ := json.Marshal(p) // plain strings and numbers
			out = append(out, string(encoded))
		}
	}
	// 120 pointers of at most 57 bytes fit a payload.
	for len(pointers) > 0 {
		n := min(120, len(pointers))
		out = append(out, strings.Join(pointers[:n], ","))
		pointers = pointers[n:]
	}
	return out
}

// sameID reports whether the messages share their id (the copies of one
// shared message).
func sameID(group []Added) bool {
	for _, m := range group[1:] {
		if m.ID != group[0].ID {
			return false
		}
	}
	return true
}

// sameShared reports whether the messages are copies of one shared message.
func sameShared(group []Added) bool {
	for _, m := range group[1:] {
		if m.sharedID != group[0].sharedID {
			return false
		}
	}
	return true
}

// sameFreeForm reports whether the messages of a free-form group share their
// fields (one notification recorded for several members always does).
func sameFreeForm(group []Added) bool {
	for _, m := range group[1:] {
		if m.Type != group[0].Type || m.Subject != group[0].Subject || m.ClientID != group[0].ClientID ||
			string(m.Message.Message) != string(group[0].Message.Message) {
			return false
		}
	}
	return true
}

// ParseNews reads an Channel payload; malformed parts are skipped.
func ParseNews(payload string) News {
	var news News
	if strings.HasPrefix(payload, "{") {
		var p inboxPayload
		if json.Unmarshal([]byte(payload), &p) != nil || len(p.Seqs) != len(p.Members) ||
			len(p.IDs) != len(p.Members) && (len(p.IDs) != 0 || p.Shared.ID == "" && p.Shared.SharedID == "") {
			return news
		}
		s := p.Shared
		var sharedID uuid.UUID
		if s.SharedID != "" {
			var err error
			if sharedID, err = uuid.Parse(s.SharedID); err != nil {
				return news
			}
		}
		frame := &Frame{}
		news.Messages = make([]Message, 0, len(p.Members))
		for i, member := range p.Members {
			id := s.ID
			switch {
			case len(p.IDs) > 0:
				id = p.IDs[i]
			case s.SharedID != "":
				id = memberMessageID(sharedID, s.SharedID, member)
			}
			news.Messages = append(news.Messages, Message{ID: id, MemberID: member, Seq: p.Seqs[i],
				ClientID: s.ClientID, Type: s.Type, SensorID: s.SensorID, SensorAddress: s.SensorAddress, SensorSite: s.SensorSite, Data: s.Data,
				Previous: s.Previous, At: s.At, Severity: s.Severity, Cause: s.Cause, Subject: s.Subject,
				Message: s.Message, CreatedAt: s.CreatedAt, Frame: frame})
		}
		return news
	}
	for pair := range strings.SplitSeq(payload, ",") {
		member, seq, ok := strings.Cut(pair, ":")
		if !ok || uuid.Validate(member) != nil {
			continue
		}
		n, err := strconv.ParseInt(seq, 10, 64)
		if err != nil {
			continue
		}
		news.Pointers = append(news.Pointers, Notice{MemberID: member, Seq: n})
	}
	return news
}
