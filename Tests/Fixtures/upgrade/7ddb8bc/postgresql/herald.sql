--
-- PostgreSQL database dump
--

\restrict iEf56JZ93XYCjEeAtnT17JD6ZlfFrpCUL34F1p8hzgXKAvO9XdNGtbUm643f8hh

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
    transport text,
    state text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at bigint,
    lease_until bigint,
    claimed_by text,
    last_reason text,
    message_id text NOT NULL,
    updated_at bigint NOT NULL,
    parked boolean DEFAULT false NOT NULL,
    fallback text,
    accepted_by text,
    receipt text,
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
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    invalidated_at bigint,
    invalidation_reason text,
    attributes text
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

COPY public.deliveries (id, notification, token, "user", transport, state, attempts, next_attempt_at, lease_until, claimed_by, last_reason, message_id, updated_at, parked, fallback, accepted_by, receipt) FROM stdin;
1	1	00000000000000000000000000000000000000000000000000000000000000e1	erin	live	delivered	1	\N	\N	\N	written to the device's stream as event 1	c9ab4bbf-ae02-4248-ab96-9f1cafa565d0	1796299478741	f	\N	f9a0bf8d-a057-48bf-9b54-3942a3f471ca	\N
2	2	00000000000000000000000000000000000000000000000000000000000000e1	erin	live	delivered	1	\N	\N	\N	written to the device's stream as event 2	8b185105-fa50-4bad-9985-0e6859892469	1796299479380	f	\N	f9a0bf8d-a057-48bf-9b54-3942a3f471ca	\N
3	3	00000000000000000000000000000000000000000000000000000000000000e1	erin	live	delivered	1	\N	\N	\N	written to the device's stream as event 3	83cc71a5-110f-4106-974e-8316f9d5c7a4	1796299479899	f	\N	f9a0bf8d-a057-48bf-9b54-3942a3f471ca	\N
4	4	00000000000000000000000000000000000000000000000000000000000000e1	erin	live	queued	0	2111659480431	\N	\N	in the inbox until the device connects	73dd008a-d936-40dc-8b65-780aace0a7b9	1796299480448	t	\N	f9a0bf8d-a057-48bf-9b54-3942a3f471ca	\N
5	5	00000000000000000000000000000000000000000000000000000000000000f1	frank	live	queued	0	2111659481040	\N	\N	in the inbox until the device connects	418f62d0-21da-4c0a-93d6-f45bd62ac9f6	1796299481066	t	\N	f9a0bf8d-a057-48bf-9b54-3942a3f471ca	\N
6	6	00000000000000000000000000000000000000000000000000000000000000e1	erin	live	queued	0	2111659481661	\N	\N	in the inbox until the device connects	286df1aa-aaa2-4510-b518-88da11d1ec12	1796299481669	t	\N	f9a0bf8d-a057-48bf-9b54-3942a3f471ca	\N
7	7	00000000000000000000000000000000000000000000000000000000000000f1	frank	live	queued	0	2111659482331	\N	\N	in the inbox until the device connects	63407f2e-3e65-402e-b997-68ad3b5f626e	1796299482343	t	\N	f9a0bf8d-a057-48bf-9b54-3942a3f471ca	\N
11	8	00000000000000000000000000000000000000000000000000000000000000d1	dave	apns-sandbox	invalid_token	1	\N	\N	\N	Unregistered	77d7bc46-7beb-47b3-90ca-f1241094f531	1796299483246	f	\N	f9a0bf8d-a057-48bf-9b54-3942a3f471ca	\N
8	8	00000000000000000000000000000000000000000000000000000000000000a2	alice	apns-sandbox	queued	1	1796299513240	\N	\N	ServiceUnavailable	6085a0b7-91bb-427c-a65d-35c098fc72ad	1796299483246	f	\N	f9a0bf8d-a057-48bf-9b54-3942a3f471ca	\N
10	8	00000000000000000000000000000000000000000000000000000000000000b1	bob	apns-prod	queued	0	1796299483260	\N	\N	transport paused: InvalidProviderToken: APNs refused the provider token; check keyId, teamId and keyFile	46f6a414-1710-4b02-850c-14d57c735bc5	1796299483261	f	\N	f9a0bf8d-a057-48bf-9b54-3942a3f471ca	\N
9	8	00000000000000000000000000000000000000000000000000000000000000a1	alice	apns-prod	queued	0	1796299483260	\N	\N	transport paused: InvalidProviderToken: APNs refused the provider token; check keyId, teamId and keyFile	5c60e17f-2e2f-4b5e-8cd6-f5ef69daa5d1	1796299483261	f	\N	f9a0bf8d-a057-48bf-9b54-3942a3f471ca	\N
13	9	00000000000000000000000000000000000000000000000000000000000000a1	alice	apns-prod	queued	0	1796299485276	\N	\N	\N	20e83d37-6b7c-43f3-ae92-4a6043392401	1796299485276	f	\N	f9a0bf8d-a057-48bf-9b54-3942a3f471ca	\N
12	9	00000000000000000000000000000000000000000000000000000000000000a2	alice	apns-sandbox	queued	1	1796299515306	\N	\N	ServiceUnavailable	df0d9143-9110-4f2e-95c0-0debcd7729d6	1796299485306	f	\N	f9a0bf8d-a057-48bf-9b54-3942a3f471ca	\N
\.


--
-- Data for Name: devices; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.devices (app, token, "user", transport, created_at, updated_at, invalidated_at, invalidation_reason, attributes) FROM stdin;
com.example.app	00000000000000000000000000000000000000000000000000000000000000a1	alice	apns-prod	1796299476143	1796299476143	\N	\N	{"environment":"production"}
com.example.app	00000000000000000000000000000000000000000000000000000000000000a2	alice	apns-sandbox	1796299476182	1796299476182	\N	\N	{"environment":"sandbox"}
com.example.app	00000000000000000000000000000000000000000000000000000000000000b1	bob	apns-prod	1796299476201	1796299476201	\N	\N	{"environment":"production"}
com.example.live	00000000000000000000000000000000000000000000000000000000000000e1	erin	apns-sandbox	1796299476254	1796299476254	\N	\N	{"environment":"sandbox"}
com.example.live	00000000000000000000000000000000000000000000000000000000000000f1	frank	apns-sandbox	1796299476288	1796299476288	\N	\N	{"environment":"sandbox"}
com.example.app	00000000000000000000000000000000000000000000000000000000000000d1	dave	apns-sandbox	1796299476230	1796299476230	1796299477352	Unregistered	{"environment":"sandbox"}
\.


--
-- Data for Name: herald_schema; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.herald_schema (version, applied_at) FROM stdin;
1	2026-12-03 12:04:35.962678+00
2	2026-12-03 12:04:35.985812+00
3	2026-12-03 12:04:35.988036+00
4	2026-12-03 12:04:35.994031+00
5	2026-12-03 12:04:35.996934+00
6	2026-12-03 12:04:35.999054+00
\.


--
-- Data for Name: inbox; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.inbox (app, "user", seq, device, notification, event, created_at) FROM stdin;
com.example.live	erin	1	00000000000000000000000000000000000000000000000000000000000000e1	01a23bca-d6ae-7e06-83fc-f8b283be35c3	\\x7b226964223a2230316132336263612d643661652d376530362d383366632d663862323833626533356333222c22617070223a22636f6d2e6578616d706c652e6c697665222c22616c657274223a226c6976652031222c22637265617465645f6174223a22323032362d31322d30335431323a30343a33382e3730325a227d	1796299478732
com.example.live	erin	2	00000000000000000000000000000000000000000000000000000000000000e1	01a23bca-d945-7f31-839a-7408cbec9d45	\\x7b226964223a2230316132336263612d643934352d376633312d383339612d373430386362656339643435222c22617070223a22636f6d2e6578616d706c652e6c697665222c22616c657274223a226c6976652032222c22637265617465645f6174223a22323032362d31322d30335431323a30343a33392e3336365a227d	1796299479375
com.example.live	erin	3	00000000000000000000000000000000000000000000000000000000000000e1	01a23bca-db47-7b0a-98ba-cbce329f4643	\\x7b226964223a2230316132336263612d646234372d376230612d393862612d636263653332396634363433222c22617070223a22636f6d2e6578616d706c652e6c697665222c22616c657274223a226c6976652033222c22637265617465645f6174223a22323032362d31322d30335431323a30343a33392e3837395a227d	1796299479889
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
1	01a23bca-d6ae-7e06-83fc-f8b283be35c3	com.example.live	com.example.live	{"body":"live 1"}	\N	1	1796299478702
2	01a23bca-d945-7f31-839a-7408cbec9d45	com.example.live	com.example.live	{"body":"live 2"}	\N	1	1796299479366
3	01a23bca-db47-7b0a-98ba-cbce329f4643	com.example.live	com.example.live	{"body":"live 3"}	\N	1	1796299479879
4	01a23bca-dd6e-73e2-88cc-630b0a9a6c3a	com.example.live	com.example.live	{"body":"parked erin 1"}	\N	1	1796299480431
5	01a23bca-dfcf-771c-ad90-4c563d7b8c71	com.example.live	com.example.live	{"body":"parked frank 1"}	\N	1	1796299481040
6	01a23bca-e23d-7b9f-85c0-b8bb44db8efd	com.example.live	com.example.live	{"body":"parked erin 2"}	\N	1	1796299481661
7	01a23bca-e4db-79f4-a3b4-9fb1318697f8	com.example.live	com.example.live	{"body":"parked frank 2"}	\N	1	1796299482331
8	01a23bca-e823-7de6-bd1f-8c017790356a	com.example.app	com.example.app	{"body":"to everyone"}	\N	4	1796299483171
9	01a23bca-f05e-7703-8a26-5cf62982cd51	com.example.app	com.example.app	{"body":"once"}	upgrade-fixture-key-1	2	1796299485276
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

\unrestrict iEf56JZ93XYCjEeAtnT17JD6ZlfFrpCUL34F1p8hzgXKAvO9XdNGtbUm643f8hh

