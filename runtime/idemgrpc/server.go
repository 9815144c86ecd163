package idemgrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Errors the interceptor gives the executor as the reason to release a key;
// the executor's observer sees them in idem.EventReleased.
var (
	// ErrNotStored: the policy declined the handler's status code.
	ErrNotStored = errors.New("idemgrpc: status not stored by policy")
	// ErrResponseTooLarge: the response exceeded WithMaxResponse.
	ErrResponseTooLarge = errors.New("idemgrpc: response larger than the storage limit")
	// ErrNotProto: the response is not a proto.Message, so it cannot be
	// stored as wire bytes.
	ErrNotProto = errors.New("idemgrpc: message is not a proto.Message")
)

func errNotProto(v any) error { return fmt.Errorf("%w: %T", ErrNotProto, v) }

// outcome is what is stored for a call: the result value of idem.Do,
// encoded by the executor's codec. Exactly one of Response and Status is
// set: the response message's wire bytes and its full name (to rebuild it
// on replay), or a google.rpc.Status's wire bytes (code, message, details).
type outcome struct {
	Type     string `json:"type,omitempty"`
	Response []byte `json:"response,omitempty"`
	Status   []byte `json:"status,omitempty"`
}

// UnaryServerInterceptor returns an interceptor that makes unary calls
// idempotent by their idempotency-key metadata, on ex's store.
//
// For a selected method (every unary method by default, see WithMethods) it
// reads the key, claims it scoped by tenant and full method name through
// idem.Do, runs the handler, stores its outcome as the policy says (the
// response message's wire bytes, or the status with its details) and
// replays it to every retry with the same key and the same request, with
// "idempotent-replayed: true" in the header metadata. The refusals:
//
//   - InvalidArgument: the key is missing (unless WithOptionalKey) or
//     malformed, or the request cannot be fingerprinted;
//   - Unauthenticated: the WithTenant function named no tenant;
//   - FailedPrecondition: the key was used with another request;
//   - Aborted with a google.rpc.RetryInfo detail: the first call with the
//     key is still running (or, WithWait, its outcome once it finishes);
//   - Unavailable: the store could not be reached (see StatusFor).
//
// Streaming calls are never intercepted: register it with
// grpc.UnaryInterceptor (or grpc.ChainUnaryInterceptor, after the
// authentication interceptor that WithTenant reads from).
//
// Exactly one of WithTenant and SingleTenant is required. It panics if the
// tenancy is missing, if ex is nil or if an option is invalid, with a
// message naming the rule or the option, as idemhttp.New does.
func UnaryServerInterceptor(ex *idem.Executor, opts ...Option) grpc.UnaryServerInterceptor {
	if ex == nil {
		panic("idemgrpc: UnaryServerInterceptor: the executor is nil")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			cfg.invalid("UnaryServerInterceptor: a nil Option")
			continue
		}
		o(&cfg)
	}
	cfg.validate()
	if cfg.bad != "" {
		panic(cfg.bad)
	}
	s := &server{cfg: cfg, ex: ex}
	return s.intercept
}

type server struct {
	cfg config
	ex  *idem.Executor
}

// run is what the handler produced in this process.
type run struct {
	resp any
	err  error
}

func (s *server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !s.cfg.selector(info.FullMethod) {
		return handler(ctx, req)
	}
	ev := Event{FullMethod: info.FullMethod}
	key, present, problem := keyFromIncoming(ctx)
	switch {
	case problem != "":
		ev.Kind, ev.Code = EventKeyInvalid, codes.InvalidArgument
		s.cfg.observe(ev)
		return nil, refusalStatus(codes.InvalidArgument, ReasonKeyInvalid, "idempotency-key is invalid: "+problem).Err()
	case !present && s.cfg.optional:
		ev.Kind = EventKeyMissing
		s.cfg.observe(ev)
		return handler(ctx, req)
	case !present:
		ev.Kind, ev.Code = EventKeyMissing, codes.InvalidArgument
		s.cfg.observe(ev)
		return nil, refusalStatus(codes.InvalidArgument, ReasonKeyMissing, "idempotency-key is missing: "+info.FullMethod+
			" is idempotent and requires an idempotency-key metadata value: a unique key per logical call, sent again unchanged on every retry of it").Err()
	}
	ev.Key = key
	if s.cfg.tenant != nil {
		if ev.Tenant = s.cfg.tenant(ctx); ev.Tenant == "" {
			ev.Kind, ev.Code = EventTenantMissing, codes.Unauthenticated
			s.cfg.observe(ev)
			return nil, refusalStatus(codes.Unauthenticated, ReasonTenantMissing, "the call has no tenant: "+info.FullMethod+
				" scopes idempotency-keys by client, and this call names none (it is not authenticated); nothing was processed").Err()
		}
	}
	var h idem.Hasher
	if err := s.cfg.fingerprint(ctx, info.FullMethod, req, &h); err != nil {
		return nil, refusalStatus(codes.InvalidArgument, ReasonRequestInvalid, "request cannot be fingerprinted: "+err.Error()).Err()
	}
	var parts idem.KeyParts
	if ev.Tenant != "" {
		parts.Tenant(ev.Tenant) // the key's tenant under a single-tenant executor: its share counts
	}
	parts.String(MetadataKey, key)
	// The lease is renewed while the handler runs, where the store can: a
	// handler that runs past its lease keeps its key (issue 35).
	method := idem.Method{Op: info.FullMethod, TTL: s.cfg.ttl, Lease: s.cfg.lease, Wait: s.cfg.wait, Renew: s.ex.CanRenew()}

	hctx := ctx
	if !s.cfg.cancel {
		// The client's cancellation is not the handler's, but its deadline
		// is: the handler and its downstream calls keep the budget.
		hctx = context.WithoutCancel(ctx)
		if dl, ok := ctx.Deadline(); ok {
			var stop context.CancelFunc
			hctx, stop = context.WithDeadline(hctx, dl)
			defer stop()
		}
	}
	var ran *run
	out, err := idem.Do(hctx, s.ex, &method, &parts, &h, func(ctx context.Context) (outcome, error) {
		ctx, stop := context.WithTimeout(ctx, s.cfg.handlerMax) // WithHandlerTimeout
		defer stop()
		var cell idem.Decisions // what the wrapped methods the handler calls decide
		ctx = idem.WithDecisions(ctx, &cell)
		if ev.Tenant != "" {
			// The door's tenant reaches every wrapper the handler calls
			// (issue 33): a SingleTenant executor below scopes by it.
			ctx = idem.ContextWithTenant(ctx, ev.Tenant)
		}
		resp, herr := handler(ctx, req)
		if _, isStatus := status.FromError(herr); !isStatus && (errors.Is(herr, context.DeadlineExceeded) || errors.Is(herr, context.Canceled)) {
			herr = status.FromContextError(herr).Err() // the handler's context ended: not Unknown
		}
		ran = &run{resp: resp, err: herr}
		return s.settle(resp, herr, cell.Verdict())
	})
	if ran != nil {
		ev.Code, ev.Err = status.Code(ran.err), err
		switch {
		case err == nil:
		case errors.Is(err, ErrNotStored), errors.Is(err, ErrDownstreamRefused):
			ev.Kind = EventNotStored
			s.cfg.observe(ev)
		case errors.Is(err, ErrResponseTooLarge), errors.Is(err, ErrNotProto):
			ev.Kind = EventResponseTooLarge
			s.cfg.observe(ev)
		case errors.Is(err, idem.ErrLeaseLost):
			// The handler ran and had its effects, but its lease was taken
			// over: its outcome is still the truth for this client.
			ev.Kind = EventStoreError
			s.cfg.observe(ev)
		default:
			// A transactional store could not commit: the handler's writes
			// were rolled back, so its response must not reach the client.
			ev.Kind, ev.Code = EventStoreError, codes.Unavailable
			s.cfg.observe(ev)
			s.logStoreError(ctx, "the outcome could not be committed", ev, err)
			return nil, refusalStatus(codes.Unavailable, ReasonNotCommitted, "idempotency store unavailable: the outcome could not be stored and the call's effects were not committed; retry with the same idempotency-key").Err()
		}
		return ran.resp, ran.err
	}
	if err != nil {
		st := s.refusal(err)
		ev.Code, ev.Err = status.Code(st), err
		switch {
		case errors.Is(err, idem.ErrPayloadMismatch):
			ev.Kind = EventConflict
		case errors.Is(err, idem.ErrInProgress):
			ev.Kind = EventInProgress
		default:
			ev.Kind = EventStoreError
			s.logStoreError(ctx, "the call was refused", ev, err)
		}
		s.cfg.observe(ev)
		return nil, st
	}
	resp, rerr := s.replay(ctx, ev, out)
	ev.Kind, ev.Code, ev.Err = EventReplayed, status.Code(rerr), rerr
	s.cfg.observe(ev)
	return resp, rerr
}

// logStoreError logs, at WARN, a store error that the client is answered
// without its details (see StatusFor).
func (s *server) logStoreError(ctx context.Context, what string, ev Event, err error) {
	s.cfg.log.LogAttrs(ctx, slog.LevelWarn, "idemgrpc: store error: "+what,
		slog.String("method", ev.FullMethod), slog.String("tenant", ev.Tenant), slog.String("key", ev.Key),
		slog.String("error", err.Error()))
}

// settle turns the handler's result into the outcome to store, or an error
// that releases the key. verdict is what the wrapped methods the handler
// called decided (see stores).
func (s *server) settle(resp any, herr error, verdict idem.Decision) (outcome, error) {
	if reason, refused := Refusal(herr); refused {
		return outcome{}, fmt.Errorf("%w (%s): %w", ErrDownstreamRefused, reason, herr)
	}
	if herr != nil {
		st, _ := status.FromError(herr) // a non-status error is Unknown
		if err := s.stores(st.Code(), verdict); err != nil {
			return outcome{}, fmt.Errorf("%w: %w", err, herr)
		}
		b, err := proto.Marshal(st.Proto())
		if err != nil {
			return outcome{}, fmt.Errorf("idemgrpc: encode status: %w", err)
		}
		return outcome{Status: b}, nil
	}
	if err := s.stores(codes.OK, verdict); err != nil {
		return outcome{}, err
	}
	m, ok := resp.(proto.Message)
	if !ok {
		return outcome{}, errNotProto(resp)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return outcome{}, fmt.Errorf("idemgrpc: encode response: %w", err)
	}
	if len(b) > s.cfg.maxResponse {
		return outcome{}, fmt.Errorf("%w: %d bytes", ErrResponseTooLarge, len(b))
	}
	return outcome{Type: string(m.ProtoReflect().Descriptor().FullName()), Response: b}, nil
}

// stores applies the one rule of what a retry sees (docs/LAYERS.md), as
// idemhttp does: when a wrapped method the handler called released its key
// (a transient error, a refusal), the outcome is not stored, whatever its
// code; when they stored or replayed their outcomes (a success, a final
// error), it is stored whatever code the handler mapped them to, except a
// code that says the server failed (Unknown, Internal, Unavailable,
// DataLoss, Unimplemented, DeadlineExceeded, Canceled) that the policy does
// not store; when none ran, the policy decides.
func (s *server) stores(code codes.Code, verdict idem.Decision) error {
	switch verdict {
	case idem.Released:
		return fmt.Errorf("%w: %v (a wrapped method released its key)", ErrNotStored, code)
	case idem.Stored:
		if !serverFailed(code) || s.cfg.policy(code) {
			return nil
		}
	}
	if !s.cfg.policy(code) {
		return fmt.Errorf("%w: %v", ErrNotStored, code)
	}
	return nil
}

// serverFailed reports whether code says the server failed (the analogues
// of HTTP's 5xx, and a cancelled call).
func serverFailed(code codes.Code) bool {
	switch code {
	case codes.Unknown, codes.Internal, codes.Unavailable, codes.DataLoss, codes.Unimplemented,
		codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// replay answers a call with a stored outcome.
func (s *server) replay(ctx context.Context, ev Event, out outcome) (any, error) {
	if err := grpc.SetHeader(ctx, metadata.Pairs(ReplayedKey, "true")); err != nil {
		return nil, status.Error(codes.Internal, "idemgrpc: set header: "+err.Error())
	}
	if out.Status != nil {
		var sp spb.Status
		if err := proto.Unmarshal(out.Status, &sp); err != nil {
			s.logStoreError(ctx, "the stored outcome could not be replayed", ev, err)
			return nil, refusalStatus(codes.Unavailable, ReasonOutcomeUndecodable, "idempotency store returned an unreadable outcome").Err()
		}
		return nil, status.ErrorProto(&sp)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(out.Type))
	if err != nil {
		s.logStoreError(ctx, "the stored outcome could not be replayed", ev, err)
		return nil, refusalStatus(codes.Internal, ReasonOutcomeUndecodable, "idemgrpc: stored response type "+out.Type+" is not linked into this server").Err()
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(out.Response, m); err != nil {
		s.logStoreError(ctx, "the stored outcome could not be replayed", ev, err)
		return nil, refusalStatus(codes.Unavailable, ReasonOutcomeUndecodable, "idempotency store returned an unreadable response").Err()
	}
	return m, nil
}

// refusal answers a call that did not run the handler and has nothing to
// replay.
func (s *server) refusal(err error) error {
	st := StatusFor(err)
	var inProgress *idem.InProgressError
	if errors.As(err, &inProgress) {
		// The expected time to the outcome: the method's expected run,
		// unless the lease ends first (WithExpectedRun).
		d := s.cfg.expected
		if left := inProgress.RetryAfter; left > 0 {
			d = min(d, left)
		}
		if s.cfg.maxRetry > 0 {
			d = min(d, s.cfg.maxRetry)
		}
		if d <= 0 {
			d = time.Second
		}
		if withInfo, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}); derr == nil {
			st = withInfo
		}
	}
	return st.Err()
}

// StatusFor returns the status the interceptor answers for an error of
// idem.Do that stopped a call before its handler ran: the first rule whose
// error matches (errors.Is), else Unavailable (the store could not be
// used, idem.ErrStoreUnavailable, its schema missing included; or a wait
// ended). Aborted answers also carry a RetryInfo detail. Every status
// carries an ErrorInfo detail (ErrorDomain, a Reason constant). The message
// is the rule's and never err's text: a store's error names its address,
// user and database, which are not the client's to read; log err on the
// server (the interceptor does, WithLogger).
func StatusFor(err error) *status.Status {
	rules := []struct {
		target error
		code   codes.Code
		reason string
		msg    string
	}{
		{idem.ErrPayloadMismatch, codes.FailedPrecondition, ReasonKeyReused,
			"idempotency-key reused with a different request: a key identifies one call and must not be reused for another"},
		{idem.ErrInProgress, codes.Aborted, ReasonInProgress,
			"a call with this idempotency-key is in progress: retry after the delay in RetryInfo to get its outcome"},
		// Before ErrMissingKey, which a missing tenant matches too.
		{idem.ErrMissingTenant, codes.Unauthenticated, ReasonTenantMissing, "the call names no tenant: the call was not processed"},
		{idem.ErrTenantConflict, codes.PermissionDenied, ReasonTenantConflict,
			"the executor and the interceptor name different tenants for the call: the call was not processed"},
		{idem.ErrMissingKey, codes.InvalidArgument, ReasonKeyMissing, "idempotency-key is missing"},
		{idem.ErrStoreBusy, codes.Unavailable, ReasonStoreBusy,
			"idempotency store is busy (its connections are all in use by running calls): the call was not processed; retry shortly with the same idempotency-key"},
		{idem.ErrStoreFull, codes.ResourceExhausted, ReasonStoreFull,
			"idempotency store is full: the call was not processed; retry later with the same idempotency-key"},
		{idem.ErrTooLarge, codes.InvalidArgument, ReasonScopeTooLarge,
			"the call's scope (tenant or method name) exceeds what the idempotency store accepts: the call was not processed"},
		{idem.ErrOutcomeNotStored, codes.Internal, ReasonOutcomeNotStored,
			"the call with this idempotency-key ran, but its response could not be stored: it cannot be replayed, and it will not run again"},
		{idem.ErrUndecodable, codes.Internal, ReasonOutcomeUndecodable,
			"the stored response of this idempotency-key no longer decodes: it cannot be replayed, and the call will not run again"},
		{idem.ErrMisconfigured, codes.Internal, ReasonMisconfigured, "the server's idempotency configuration is invalid"},
	}
	for _, r := range rules {
		if errors.Is(err, r.target) {
			return refusalStatus(r.code, r.reason, r.msg)
		}
	}
	return refusalStatus(codes.Unavailable, ReasonStoreUnavailable,
		"idempotency store unavailable: the call was not processed; retry with the same idempotency-key")
}
