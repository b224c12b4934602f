package incident

import (
	"context"
	"errors"
	"time"

	"github.com/lockstream/lockstream/domain"
)

// APIStore is the store as the API sees it (webapi.IncidentStore): plain
// types, so that the API imports no daemon package. Build it with
// NewAPIStore.
type APIStore struct {
	store *PostgresStore
}

// NewAPIStore returns store as the API's.
func NewAPIStore(store *PostgresStore) APIStore { return APIStore{store: store} }

// ListIncidents lists a client's incidents (clientID) or a member's
// (memberID), in state or any, newest first.
func (a APIStore) ListIncidents(ctx context.Context, clientID, memberID, state string, limit int) ([]domain.Incident, error) {
	return a.store.List(ctx, Filter{ClientID: clientID, MemberID: memberID, State: state, Limit: limit})
}

// GetIncident reads an incident with its timeline; with memberID, one of
// that member's client only.
func (a APIStore) GetIncident(ctx context.Context, id, memberID string) (domain.Incident, error) {
	return a.store.Get(ctx, id, memberID)
}

// ActOnIncident acknowledges ("ack") or resolves ("resolve") the incident for
// the member.
func (a APIStore) ActOnIncident(ctx context.Context, id, memberID, action, channel string, now time.Time) (domain.Incident, error) {
	return a.store.Act(ctx, id, memberID, Action(action), channel, now)
}

// PeekAckToken says what an ack link's token is (valid, used, expired,
// unknown), changing nothing.
func (a APIStore) PeekAckToken(ctx context.Context, token string, now time.Time) (string, error) {
	st, err := a.store.PeekToken(ctx, token, now)
	return string(st), err
}

// AckByToken uses an ack link's token; see PostgresStore.AckByToken.
func (a APIStore) AckByToken(ctx context.Context, token string, now time.Time) (string, domain.Incident, error) {
	st, inc, err := a.store.AckByToken(ctx, token, now)
	return string(st), inc, err
}

// EscalationPolicy returns the client's policy and whether it set one.
func (a APIStore) EscalationPolicy(ctx context.Context, clientID string) (domain.EscalationPolicy, bool, error) {
	return a.store.Policy(ctx, clientID)
}

// PutEscalationPolicy sets the client's policy; the fields naming ids that
// are not its members come back, with nothing set.
func (a APIStore) PutEscalationPolicy(ctx context.Context, clientID string, pol domain.EscalationPolicy) ([]domain.FieldError, error) {
	bad, err := a.store.PutPolicy(ctx, clientID, pol)
	if errors.Is(err, ErrNotMembers) {
		return bad, nil
	}
	return nil, err
}

// DeleteEscalationPolicy removes the client's policy.
func (a APIStore) DeleteEscalationPolicy(ctx context.Context, clientID string) error {
	return a.store.DeletePolicy(ctx, clientID)
}
