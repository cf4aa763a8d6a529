--
-- PostgreSQL database dump
--

\restrict bmHD7IzhWWZLQLSLsUqncUpCzD96bMiaBjuNa2yY4ZnVbcVbeXK9B206lKomcat

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: deliveries; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.deliveries (
    id bigint NOT NULL,
    notification bigint NOT NULL,
    token text NOT NULL,
    "user" text,
    environment text NOT NULL,
    transport text,
    state text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at bigint,
    lease_until bigint,
    claimed_by text,
    last_reason text,
    apns_id text NOT NULL,
    updated_at bigint NOT NULL,
    parked boolean DEFAULT false NOT NULL,
    fallback text,
    accepted_by text,
    CONSTRAINT deliveries_state_check CHECK ((state = ANY (ARRAY['queued'::text, 'sent'::text, 'delivered'::text, 'failed'::text, 'invalid_token'::text, 'rejected'::text, 'expired'::text])))
);


--
-- Name: deliveries_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.deliveries_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: deliveries_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.deliveries_id_seq OWNED BY public.deliveries.id;


--
-- Name: devices; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.devices (
    app text NOT NULL,
    token text NOT NULL,
    "user" text NOT NULL,
    transport text NOT NULL,
    environment text NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    invalidated_at bigint,
    invalidation_reason text,
    CONSTRAINT devices_environment_check CHECK ((environment = ANY (ARRAY['sandbox'::text, 'production'::text])))
);


--
-- Name: herald_schema; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.herald_schema (
    version integer NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: inbox; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.inbox (
    app text NOT NULL,
    "user" text NOT NULL,
    seq bigint NOT NULL,
    device text NOT NULL,
    notification text NOT NULL,
    event bytea NOT NULL,
    created_at bigint NOT NULL
);


--
-- Name: inbox_sequences; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.inbox_sequences (
    app text NOT NULL,
    "user" text NOT NULL,
    seq bigint NOT NULL
);


--
-- Name: notifications; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.notifications (
    seq bigint NOT NULL,
    id text NOT NULL,
    app text NOT NULL,
    topic text NOT NULL,
    content text NOT NULL,
    idempotency_key text,
    deliveries integer NOT NULL,
    created_at bigint NOT NULL
);


--
-- Name: notifications_seq_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.notifications_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: notifications_seq_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.notifications_seq_seq OWNED BY public.notifications.seq;


--
-- Name: presence; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.presence (
    app text NOT NULL,
    device text NOT NULL,
    node text NOT NULL,
    "user" text NOT NULL,
    transport text NOT NULL,
    seen timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: deliveries id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.deliveries ALTER COLUMN id SET DEFAULT nextval('public.deliveries_id_seq'::regclass);


--
-- Name: notifications seq; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.notifications ALTER COLUMN seq SET DEFAULT nextval('public.notifications_seq_seq'::regclass);


--
-- Data for Name: deliveries; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.deliveries (id, notification, token, "user", environment, transport, state, attempts, next_attempt_at, lease_until, claimed_by, last_reason, apns_id, updated_at, parked, fallback, accepted_by) FROM stdin;
1	1	00000000000000000000000000000000000000000000000000000000000000e1	erin	sandbox	live	delivered	1	\N	\N	\N	written to the device's stream as event 1	524189fe-0678-42ea-841f-edc1072d35d4	1796163188492	f	\N	882bd0e1-2885-4350-8cdd-15d4db61723f
2	2	00000000000000000000000000000000000000000000000000000000000000e1	erin	sandbox	live	delivered	1	\N	\N	\N	written to the device's stream as event 2	8f364e68-fe0a-48d2-a7dc-6d2a8b3256b4	1796163189318	f	\N	882bd0e1-2885-4350-8cdd-15d4db61723f
3	3	00000000000000000000000000000000000000000000000000000000000000e1	erin	sandbox	live	delivered	1	\N	\N	\N	written to the device's stream as event 3	1d1c4dff-fb15-4c94-aa95-b34870360671	1796163190020	f	\N	882bd0e1-2885-4350-8cdd-15d4db61723f
4	4	00000000000000000000000000000000000000000000000000000000000000e1	erin	sandbox	live	queued	0	2111523192345	\N	\N	in the inbox until the device connects	729cee57-3db8-4095-a413-e5cc3cb9e078	1796163192358	t	\N	882bd0e1-2885-4350-8cdd-15d4db61723f
5	5	00000000000000000000000000000000000000000000000000000000000000f1	frank	sandbox	live	queued	0	2111523192966	\N	\N	in the inbox until the device connects	ddd7da50-7186-451c-9daf-e6e12b246bb1	1796163192982	t	\N	882bd0e1-2885-4350-8cdd-15d4db61723f
6	6	00000000000000000000000000000000000000000000000000000000000000e1	erin	sandbox	live	queued	0	2111523193533	\N	\N	in the inbox until the device connects	4066deaa-10ba-4a1b-9c96-6ca1eacbf823	1796163193537	t	\N	882bd0e1-2885-4350-8cdd-15d4db61723f
7	7	00000000000000000000000000000000000000000000000000000000000000f1	frank	sandbox	live	queued	0	2111523194114	\N	\N	in the inbox until the device connects	d2c408c0-0356-4940-8eae-1ebc8aa7ba8a	1796163194124	t	\N	882bd0e1-2885-4350-8cdd-15d4db61723f
10	8	00000000000000000000000000000000000000000000000000000000000000b1	bob	production	apns-prod	queued	0	1796163194684	\N	\N	transport paused: InvalidProviderToken: APNs refused the provider token; check keyId, teamId and keyFile	ea2c56c2-4eac-4366-8d3b-f646641c0618	1796163194685	f	\N	882bd0e1-2885-4350-8cdd-15d4db61723f
9	8	00000000000000000000000000000000000000000000000000000000000000a1	alice	production	apns-prod	queued	0	1796163194684	\N	\N	transport paused: InvalidProviderToken: APNs refused the provider token; check keyId, teamId and keyFile	b7a359ce-8d0b-4bf2-ac86-19485247213b	1796163194685	f	\N	882bd0e1-2885-4350-8cdd-15d4db61723f
11	8	00000000000000000000000000000000000000000000000000000000000000d1	dave	sandbox	apns-sandbox	invalid_token	1	\N	\N	\N	Unregistered	d65b565c-17f7-4eab-a048-bc6f61e58011	1796163194689	f	\N	882bd0e1-2885-4350-8cdd-15d4db61723f
8	8	00000000000000000000000000000000000000000000000000000000000000a2	alice	sandbox	apns-sandbox	queued	1	1796163224685	\N	\N	ServiceUnavailable	28ad5b71-a11c-4ea0-a77e-dd14210ac6fd	1796163194689	f	\N	882bd0e1-2885-4350-8cdd-15d4db61723f
13	9	00000000000000000000000000000000000000000000000000000000000000a1	alice	production	apns-prod	queued	0	1796163196513	\N	\N	\N	5158f6a7-9edd-4000-a9ae-42c33f72f344	1796163196513	f	\N	882bd0e1-2885-4350-8cdd-15d4db61723f
12	9	00000000000000000000000000000000000000000000000000000000000000a2	alice	sandbox	apns-sandbox	queued	1	1796163226534	\N	\N	ServiceUnavailable	f286992e-1512-4233-872b-85919b9dfcb2	1796163196534	f	\N	882bd0e1-2885-4350-8cdd-15d4db61723f
\.


--
-- Data for Name: devices; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.devices (app, token, "user", transport, environment, created_at, updated_at, invalidated_at, invalidation_reason) FROM stdin;
com.example.app	00000000000000000000000000000000000000000000000000000000000000a1	alice	apns-prod	production	1796163186107	1796163186107	\N	\N
com.example.app	00000000000000000000000000000000000000000000000000000000000000a2	alice	apns-sandbox	sandbox	1796163186134	1796163186134	\N	\N
com.example.app	00000000000000000000000000000000000000000000000000000000000000b1	bob	apns-prod	production	1796163186150	1796163186150	\N	\N
com.example.live	00000000000000000000000000000000000000000000000000000000000000e1	erin	apns-sandbox	sandbox	1796163186194	1796163186194	\N	\N
com.example.live	00000000000000000000000000000000000000000000000000000000000000f1	frank	apns-sandbox	sandbox	1796163186209	1796163186209	\N	\N
com.example.app	00000000000000000000000000000000000000000000000000000000000000d1	dave	apns-sandbox	sandbox	1796163186174	1796163186174	1796163187042	Unregistered
\.


--
-- Data for Name: herald_schema; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.herald_schema (version, applied_at) FROM stdin;
1	2026-12-01 22:13:05.878831+00
2	2026-12-01 22:13:05.937866+00
3	2026-12-01 22:13:05.940397+00
4	2026-12-01 22:13:05.948118+00
5	2026-12-01 22:13:05.966114+00
\.


--
-- Data for Name: inbox; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.inbox (app, "user", seq, device, notification, event, created_at) FROM stdin;
com.example.live	erin	1	00000000000000000000000000000000000000000000000000000000000000e1	01a233ab-36e0-7e76-8fd3-dc79e9ff5fe1	\\x7b226964223a2230316132333361622d333665302d376537362d386664332d646337396539666635666531222c22617070223a22636f6d2e6578616d706c652e6c697665222c22616c657274223a226c6976652031222c22637265617465645f6174223a22323032362d31322d30315432323a31333a30382e3434395a227d	1796163188487
com.example.live	erin	2	00000000000000000000000000000000000000000000000000000000000000e1	01a233ab-3a2e-7e71-a6e3-5cc041d8b77f	\\x7b226964223a2230316132333361622d336132652d376537312d613665332d356363303431643862373766222c22617070223a22636f6d2e6578616d706c652e6c697665222c22616c657274223a226c6976652032222c22637265617465645f6174223a22323032362d31322d30315432323a31333a30392e3239345a227d	1796163189311
com.example.live	erin	3	00000000000000000000000000000000000000000000000000000000000000e1	01a233ab-3cef-7c8a-a0a8-7658a90f5b5b	\\x7b226964223a2230316132333361622d336365662d376338612d613061382d373635386139306635623562222c22617070223a22636f6d2e6578616d706c652e6c697665222c22616c657274223a226c6976652033222c22637265617465645f6174223a22323032362d31322d30315432323a31333a31302e3030305a227d	1796163190015
\.


--
-- Data for Name: inbox_sequences; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.inbox_sequences (app, "user", seq) FROM stdin;
com.example.live	erin	3
\.


--
-- Data for Name: notifications; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.notifications (seq, id, app, topic, content, idempotency_key, deliveries, created_at) FROM stdin;
1	01a233ab-36e0-7e76-8fd3-dc79e9ff5fe1	com.example.live	com.example.live	{"alert":"live 1"}	\N	1	1796163188449
2	01a233ab-3a2e-7e71-a6e3-5cc041d8b77f	com.example.live	com.example.live	{"alert":"live 2"}	\N	1	1796163189294
3	01a233ab-3cef-7c8a-a0a8-7658a90f5b5b	com.example.live	com.example.live	{"alert":"live 3"}	\N	1	1796163190000
4	01a233ab-4619-71d1-8546-4a61e7dd4a53	com.example.live	com.example.live	{"alert":"parked erin 1"}	\N	1	1796163192345
5	01a233ab-4886-7064-a9ed-9993075fe20f	com.example.live	com.example.live	{"alert":"parked frank 1"}	\N	1	1796163192966
6	01a233ab-4abd-7a51-8697-b631d28b19d9	com.example.live	com.example.live	{"alert":"parked erin 2"}	\N	1	1796163193533
7	01a233ab-4d01-7124-bfe3-74c630d57941	com.example.live	com.example.live	{"alert":"parked frank 2"}	\N	1	1796163194114
8	01a233ab-4f26-7424-aea5-5e826c72853d	com.example.app	com.example.app	{"alert":"to everyone"}	\N	4	1796163194663
9	01a233ab-5662-798c-8c31-a7173bd6092e	com.example.app	com.example.app	{"alert":"once"}	upgrade-fixture-key-1	2	1796163196513
\.


--
-- Data for Name: presence; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.presence (app, device, node, "user", transport, seen) FROM stdin;
\.


--
-- Name: deliveries_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.deliveries_id_seq', 13, true);


--
-- Name: notifications_seq_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.notifications_seq_seq', 9, true);


--
-- Name: deliveries deliveries_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.deliveries
    ADD CONSTRAINT deliveries_pkey PRIMARY KEY (id);


--
-- Name: devices devices_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.devices
    ADD CONSTRAINT devices_pkey PRIMARY KEY (app, token);


--
-- Name: herald_schema herald_schema_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.herald_schema
    ADD CONSTRAINT herald_schema_pkey PRIMARY KEY (version);


--
-- Name: inbox inbox_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (app, "user", seq);


--
-- Name: inbox_sequences inbox_sequences_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.inbox_sequences
    ADD CONSTRAINT inbox_sequences_pkey PRIMARY KEY (app, "user");


--
-- Name: notifications notifications_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.notifications
    ADD CONSTRAINT notifications_id_key UNIQUE (id);


--
-- Name: notifications notifications_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.notifications
    ADD CONSTRAINT notifications_pkey PRIMARY KEY (seq);


--
-- Name: presence presence_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.presence
    ADD CONSTRAINT presence_pkey PRIMARY KEY (app, device, node);


--
-- Name: deliveries_by_notification; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX deliveries_by_notification ON public.deliveries USING btree (notification);


--
-- Name: deliveries_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX deliveries_due ON public.deliveries USING btree (transport, next_attempt_at, id) WHERE (state = 'queued'::text);


--
-- Name: deliveries_leased; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX deliveries_leased ON public.deliveries USING btree (lease_until) WHERE (lease_until IS NOT NULL);


--
-- Name: deliveries_parked; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX deliveries_parked ON public.deliveries USING btree (transport, token) WHERE parked;


--
-- Name: devices_by_user; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX devices_by_user ON public.devices USING btree (app, "user", updated_at DESC);


--
-- Name: devices_invalidated; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX devices_invalidated ON public.devices USING btree (invalidated_at) WHERE (invalidated_at IS NOT NULL);


--
-- Name: inbox_by_age; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX inbox_by_age ON public.inbox USING btree (app, created_at);


--
-- Name: inbox_by_device; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX inbox_by_device ON public.inbox USING btree (app, "user", device, seq);


--
-- Name: notifications_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX notifications_created ON public.notifications USING btree (created_at);


--
-- Name: notifications_idempotency; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX notifications_idempotency ON public.notifications USING btree (app, idempotency_key) WHERE (idempotency_key IS NOT NULL);


--
-- Name: presence_by_device; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX presence_by_device ON public.presence USING btree (transport, device);


--
-- PostgreSQL database dump complete
--

\unrestrict bmHD7IzhWWZLQLSLsUqncUpCzD96bMiaBjuNa2yY4ZnVbcVbeXK9B206lKomcat

