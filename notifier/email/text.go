package email

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/wneessen/go-mail"

	"github.com/lockstream/lockstream/notifier"
)

// SendText makes one attempt to mail a plain-text message (an operator alert,
// not a notification: no template) to the address to, and classifies it as Send
// does.
func (s *Sender) SendText(ctx context.Context, to, subject, text string) notifier.Result {
	m := mail.NewMsg()
	if err := m.From(s.cfg.From); err != nil {
		return failed(ErrorTypeInvalidNotification, fmt.Errorf("setting From %q: %w", s.cfg.From, err))
	}
	if err := m.To(to); err != nil {
		return failed(ErrorTypeInvalidAddress, fmt.Errorf("recipient %q: %w", to, err))
	}
	if strings.TrimSpace(subject) == "" {
		return failed(ErrorTypeInvalidNotification, errors.New("empty subject"))
	}
	m.Subject(strings.Join(strings.Fields(subject), " "))
	m.SetMessageID()
	m.SetDate()
	m.SetGenHeader("Auto-Submitted", "auto-generated")
	m.SetBodyString(mail.TypeTextPlain, text)

	return s.attempt(ctx, m)
}

// SendPrepared makes one attempt to mail a message rendered by its caller (a
// client's weekly report): a plain-text and an HTML body, its Message-ID made
// of id (a delivery id, so a re-sent report keeps it), and classifies it as
// Send does.
func (s *Sender) SendPrepared(ctx context.Context, to, id, subject, text, html string) notifier.Result {
	if !validMessageIDPart(id) {
		return failed(ErrorTypeInvalidNotification, fmt.Errorf("id %q cannot form a Message-ID", id))
	}
	if strings.TrimSpace(subject) == "" || text == "" || html == "" {
		return failed(ErrorTypeInvalidNotification, errors.New("empty subject, text or HTML"))
	}
	m := mail.NewMsg()
	if err := m.From(s.cfg.From); err != nil {
		return failed(ErrorTypeInvalidNotification, fmt.Errorf("setting From %q: %w", s.cfg.From, err))
	}
	if err := m.To(to); err != nil {
		return failed(ErrorTypeInvalidAddress, fmt.Errorf("recipient %q: %w", to, err))
	}
	m.Subject(strings.Join(strings.Fields(subject), " "))
	m.SetMessageIDWithValue(id + "@lockstream")
	m.SetDate()
	m.SetGenHeader("Auto-Submitted", "auto-generated")
	m.SetBodyString(mail.TypeTextPlain, text)
	m.AddAlternativeString(mail.TypeTextHTML, html)
	return s.attempt(ctx, m)
}
