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
