--
-- PostgreSQL database dump
--

\restrict 7pyHQNKEc0aFkrH8sD7zzT8hBdGdFikZXYm9DlU8DC3QY2ts6zEzjFc1UIuLFBb

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
1	1	00000000000000000000000000000000000000000000000000000000000000e1	erin	sandbox	live	delivered	1	\N	\N	\N	written to the device's stream as event 1	90897f87-eae3-4044-86bf-f4ec8be38781	1796164212911	f	\N	117196f0-bd2a-440e-9df9-54e6f4594b4c
2	2	00000000000000000000000000000000000000000000000000000000000000e1	erin	sandbox	live	delivered	1	\N	\N	\N	written to the device's stream as event 2	dc482067-e536-4d7e-a042-f330395d26e1	1796164214302	f	\N	117196f0-bd2a-440e-9df9-54e6f4594b4c
3	3	00000000000000000000000000000000000000000000000000000000000000e1	erin	sandbox	live	delivered	1	\N	\N	\N	written to the device's stream as event 3	f710608a-0c14-495a-a75a-0c297ccf5f00	1796164215718	f	\N	117196f0-bd2a-440e-9df9-54e6f4594b4c
4	4	00000000000000000000000000000000000000000000000000000000000000e1	erin	sandbox	live	queued	0	2111524218792	\N	\N	in the inbox until the device connects	bd52b519-ab99-4575-821c-10faec3ccf9b	1796164218807	t	\N	117196f0-bd2a-440e-9df9-54e6f4594b4c
5	5	00000000000000000000000000000000000000000000000000000000000000f1	frank	sandbox	live	queued	0	2111524220280	\N	\N	in the inbox until the device connects	2a4bde9a-8eb5-4852-9546-a7d59ae31f9c	1796164220293	t	\N	117196f0-bd2a-440e-9df9-54e6f4594b4c
6	6	00000000000000000000000000000000000000000000000000000000000000e1	erin	sandbox	live	queued	0	2111524221445	\N	\N	in the inbox until the device connects	415c6d7b-2f10-4021-aea6-280425f3003e	1796164221511	t	\N	117196f0-bd2a-440e-9df9-54e6f4594b4c
7	7	00000000000000000000000000000000000000000000000000000000000000f1	frank	sandbox	live	queued	0	2111524222442	\N	\N	in the inbox until the device connects	d0858a5b-9b11-442b-ae22-8776eb879029	1796164222449	t	\N	117196f0-bd2a-440e-9df9-54e6f4594b4c
10	8	00000000000000000000000000000000000000000000000000000000000000b1	bob	production	apns-prod	queued	0	1796164223755	\N	\N	transport paused: InvalidProviderToken: APNs refused the provider token; check keyId, teamId and keyFile	0b5650e3-1a49-4da1-8e3b-3aa594624f7d	1796164223755	f	\N	117196f0-bd2a-440e-9df9-54e6f4594b4c
9	8	00000000000000000000000000000000000000000000000000000000000000a1	alice	production	apns-prod	queued	0	1796164223755	\N	\N	transport paused: InvalidProviderToken: APNs refused the provider token; check keyId, teamId and keyFile	3bb4cba5-571c-4e7b-a52f-ba7a46287e36	1796164223755	f	\N	117196f0-bd2a-440e-9df9-54e6f4594b4c
11	8	00000000000000000000000000000000000000000000000000000000000000d1	dave	sandbox	apns-sandbox	invalid_token	1	\N	\N	\N	Unregistered	c6a64109-3a84-4c6e-ace3-ce403039b909	1796164223774	f	\N	117196f0-bd2a-440e-9df9-54e6f4594b4c
8	8	00000000000000000000000000000000000000000000000000000000000000a2	alice	sandbox	apns-sandbox	queued	1	1796164253755	\N	\N	ServiceUnavailable	915f57e1-a381-4ba7-8caf-42ba701dc153	1796164223774	f	\N	117196f0-bd2a-440e-9df9-54e6f4594b4c
13	9	00000000000000000000000000000000000000000000000000000000000000a1	alice	production	apns-prod	queued	0	1796164226974	\N	\N	\N	862ea75b-c629-4b4b-ae22-89a644c1ce10	1796164226974	f	\N	117196f0-bd2a-440e-9df9-54e6f4594b4c
12	9	00000000000000000000000000000000000000000000000000000000000000a2	alice	sandbox	apns-sandbox	queued	1	1796164257011	\N	\N	ServiceUnavailable	11fa1188-c1a1-4400-8601-0fc3ffd28cf3	1796164227011	f	\N	117196f0-bd2a-440e-9df9-54e6f4594b4c
\.


--
-- Data for Name: devices; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.devices (app, token, "user", transport, environment, created_at, updated_at, invalidated_at, invalidation_reason) FROM stdin;
com.example.app	00000000000000000000000000000000000000000000000000000000000000a1	alice	apns-prod	production	1796164208626	1796164208626	\N	\N
com.example.app	00000000000000000000000000000000000000000000000000000000000000a2	alice	apns-sandbox	sandbox	1796164208754	1796164208754	\N	\N
com.example.app	00000000000000000000000000000000000000000000000000000000000000b1	bob	apns-prod	production	1796164208826	1796164208826	\N	\N
com.example.live	00000000000000000000000000000000000000000000000000000000000000e1	erin	apns-sandbox	sandbox	1796164208974	1796164208974	\N	\N
com.example.live	00000000000000000000000000000000000000000000000000000000000000f1	frank	apns-sandbox	sandbox	1796164209019	1796164209019	\N	\N
com.example.app	00000000000000000000000000000000000000000000000000000000000000d1	dave	apns-sandbox	sandbox	1796164208909	1796164208909	1796164210394	Unregistered
\.


--
-- Data for Name: herald_schema; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.herald_schema (version, applied_at) FROM stdin;
1	2026-12-01 22:30:07.927297+00
2	2026-12-01 22:30:08.044395+00
3	2026-12-01 22:30:08.072212+00
4	2026-12-01 22:30:08.111247+00
5	2026-12-01 22:30:08.134807+00
\.


--
-- Data for Name: inbox; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.inbox (app, "user", seq, device, notification, event, created_at) FROM stdin;
com.example.live	erin	1	00000000000000000000000000000000000000000000000000000000000000e1	01a233ba-d838-76b9-83c2-02f446730304	\\x7b226964223a2230316132333362612d643833382d373662392d383363322d303266343436373330333034222c22617070223a22636f6d2e6578616d706c652e6c697665222c22616c657274223a226c6976652031222c22637265617465645f6174223a22323032362d31322d30315432323a33303a31322e3739335a227d	1796164212875
com.example.live	erin	2	00000000000000000000000000000000000000000000000000000000000000e1	01a233ba-ddf2-7824-948f-578f0e792287	\\x7b226964223a2230316132333362612d646466322d373832342d393438662d353738663065373932323837222c22617070223a22636f6d2e6578616d706c652e6c697665222c22616c657274223a226c6976652032222c22637265617465645f6174223a22323032362d31322d30315432323a33303a31342e3235385a227d	1796164214290
com.example.live	erin	3	00000000000000000000000000000000000000000000000000000000000000e1	01a233ba-e38e-77e5-a08a-282a0d845386	\\x7b226964223a2230316132333362612d653338652d373765352d613038612d323832613064383435333836222c22617070223a22636f6d2e6578616d706c652e6c697665222c22616c657274223a226c6976652033222c22637265617465645f6174223a22323032362d31322d30315432323a33303a31352e3639355a227d	1796164215711
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
1	01a233ba-d838-76b9-83c2-02f446730304	com.example.live	com.example.live	{"alert":"live 1"}	\N	1	1796164212793
2	01a233ba-ddf2-7824-948f-578f0e792287	com.example.live	com.example.live	{"alert":"live 2"}	\N	1	1796164214258
3	01a233ba-e38e-77e5-a08a-282a0d845386	com.example.live	com.example.live	{"alert":"live 3"}	\N	1	1796164215695
4	01a233ba-efa8-7794-ab3e-a8106edbfbac	com.example.live	com.example.live	{"alert":"parked erin 1"}	\N	1	1796164218792
5	01a233ba-f578-7758-9d88-c7ae859591af	com.example.live	com.example.live	{"alert":"parked frank 1"}	\N	1	1796164220280
6	01a233ba-fa05-7dff-b170-fc7674be6121	com.example.live	com.example.live	{"alert":"parked erin 2"}	\N	1	1796164221445
7	01a233ba-fdea-7c2e-99ac-9e96fb4e7fdb	com.example.live	com.example.live	{"alert":"parked frank 2"}	\N	1	1796164222442
8	01a233bb-02ad-7a90-b371-ba7ae4a83a31	com.example.app	com.example.app	{"alert":"to everyone"}	\N	4	1796164223662
9	01a233bb-0f9f-7fa4-91d6-45d498c8f7c4	com.example.app	com.example.app	{"alert":"once"}	upgrade-fixture-key-1	2	1796164226974
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

\unrestrict 7pyHQNKEc0aFkrH8sD7zzT8hBdGdFikZXYm9DlU8DC3QY2ts6zEzjFc1UIuLFBb

