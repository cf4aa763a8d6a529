--
-- PostgreSQL database dump
--

\restrict pICj7lZQcPJGCME9d7PLvsRJb9a0Ccg6o8jjvt7gg2siQ08evaYsJyxiEBaWr7Z

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
    stream_device text,
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

COPY public.deliveries (id, notification, token, "user", transport, state, attempts, next_attempt_at, lease_until, claimed_by, last_reason, message_id, updated_at, parked, fallback, accepted_by, receipt, stream_device) FROM stdin;
1	1	00000000000000000000000000000000000000000000000000000000000000e1	erin	live	delivered	1	\N	\N	\N	written to the device's stream as event 1	ea16cd68-375a-445a-b181-a870aaf92f42	1796574733110	f	\N	74d15fdc-f420-425e-a498-28a3000d1324	\N	\N
2	2	00000000000000000000000000000000000000000000000000000000000000e1	erin	live	delivered	1	\N	\N	\N	written to the device's stream as event 2	3bb5cc70-3737-4a20-adad-a1fb56820aee	1796574751298	f	\N	74d15fdc-f420-425e-a498-28a3000d1324	\N	\N
3	3	00000000000000000000000000000000000000000000000000000000000000e1	erin	live	delivered	1	\N	\N	\N	written to the device's stream as event 3	0ecc6a8f-5223-4b6e-a2c7-a87c45f9c6c7	1796574763358	f	\N	74d15fdc-f420-425e-a498-28a3000d1324	\N	\N
4	4	00000000000000000000000000000000000000000000000000000000000000e1	erin	live	queued	0	2111934769506	\N	\N	in the inbox until the device connects	203c48a0-dd20-44a9-a503-527c9cd0113b	1796574769571	t	\N	74d15fdc-f420-425e-a498-28a3000d1324	\N	\N
5	5	00000000000000000000000000000000000000000000000000000000000000f1	frank	live	queued	0	2111934776286	\N	\N	in the inbox until the device connects	23d19b0f-e6e7-489f-b04a-a4c4b52f55ee	1796574776291	t	\N	74d15fdc-f420-425e-a498-28a3000d1324	\N	\N
6	6	00000000000000000000000000000000000000000000000000000000000000e1	erin	live	queued	0	2111934780019	\N	\N	in the inbox until the device connects	6aa92c27-bd35-40a5-9635-b33d636f04c0	1796574780034	t	\N	74d15fdc-f420-425e-a498-28a3000d1324	\N	\N
7	7	00000000000000000000000000000000000000000000000000000000000000f1	frank	live	queued	0	2111934787568	\N	\N	in the inbox until the device connects	5cd1bea1-6482-4f94-9def-98bba5b777a5	1796574787626	t	\N	74d15fdc-f420-425e-a498-28a3000d1324	\N	\N
10	8	00000000000000000000000000000000000000000000000000000000000000b1	bob	apns-prod	queued	0	1796574791041	\N	\N	transport paused: InvalidProviderToken: APNs refused the provider token; check keyId, teamId and keyFile	81cf64e6-13e9-4ebc-a734-a12fc29e4cd6	1796574791041	f	\N	74d15fdc-f420-425e-a498-28a3000d1324	\N	\N
9	8	00000000000000000000000000000000000000000000000000000000000000a1	alice	apns-prod	queued	0	1796574791041	\N	\N	transport paused: InvalidProviderToken: APNs refused the provider token; check keyId, teamId and keyFile	fd8bee1e-3229-4bf8-bf53-8f871ff9cea1	1796574791041	f	\N	74d15fdc-f420-425e-a498-28a3000d1324	\N	\N
11	8	00000000000000000000000000000000000000000000000000000000000000d1	dave	apns-sandbox	invalid_token	1	\N	\N	\N	Unregistered	138239f5-c696-4a06-bee6-5603b5f971a1	1796574791082	f	\N	74d15fdc-f420-425e-a498-28a3000d1324	\N	\N
8	8	00000000000000000000000000000000000000000000000000000000000000a2	alice	apns-sandbox	queued	1	1796574821042	\N	\N	ServiceUnavailable	3e55f7ae-9061-4981-b678-8083420bd21c	1796574791082	f	\N	74d15fdc-f420-425e-a498-28a3000d1324	\N	\N
13	9	00000000000000000000000000000000000000000000000000000000000000a1	alice	apns-prod	queued	0	1796574795962	\N	\N	\N	e37f1b6c-1083-4e53-b902-f167949e7726	1796574795962	f	\N	74d15fdc-f420-425e-a498-28a3000d1324	\N	\N
12	9	00000000000000000000000000000000000000000000000000000000000000a2	alice	apns-sandbox	queued	1	1796574826010	\N	\N	ServiceUnavailable	a00ffe04-00be-429b-81cb-e5283bbe49d2	1796574796010	f	\N	74d15fdc-f420-425e-a498-28a3000d1324	\N	\N
\.


--
-- Data for Name: devices; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.devices (app, token, "user", transport, created_at, updated_at, invalidated_at, invalidation_reason, attributes) FROM stdin;
com.example.app	00000000000000000000000000000000000000000000000000000000000000a1	alice	apns-prod	1796574716967	1796574716967	\N	\N	{"environment":"production"}
com.example.app	00000000000000000000000000000000000000000000000000000000000000a2	alice	apns-sandbox	1796574717242	1796574717242	\N	\N	{"environment":"sandbox"}
com.example.app	00000000000000000000000000000000000000000000000000000000000000b1	bob	apns-prod	1796574717262	1796574717262	\N	\N	{"environment":"production"}
com.example.live	00000000000000000000000000000000000000000000000000000000000000e1	erin	apns-sandbox	1796574717774	1796574717774	\N	\N	{"environment":"sandbox"}
com.example.live	00000000000000000000000000000000000000000000000000000000000000f1	frank	apns-sandbox	1796574718190	1796574718190	\N	\N	{"environment":"sandbox"}
com.example.app	00000000000000000000000000000000000000000000000000000000000000d1	dave	apns-sandbox	1796574717274	1796574717274	1796574723650	Unregistered	{"environment":"sandbox"}
\.


--
-- Data for Name: herald_schema; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.herald_schema (version, applied_at) FROM stdin;
1	2026-12-06 16:31:55.641603+00
2	2026-12-06 16:31:55.809623+00
3	2026-12-06 16:31:55.861943+00
4	2026-12-06 16:31:55.954134+00
5	2026-12-06 16:31:55.994199+00
6	2026-12-06 16:31:56.04964+00
7	2026-12-06 16:31:56.121639+00
\.


--
-- Data for Name: inbox; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.inbox (app, "user", seq, device, notification, event, created_at) FROM stdin;
com.example.live	erin	1	00000000000000000000000000000000000000000000000000000000000000e1	01a24c32-e2c2-7f06-a18e-f66aedabb07c	\\x7b226964223a2230316132346333322d653263322d376630362d613138652d663636616564616262303763222c22617070223a22636f6d2e6578616d706c652e6c697665222c22616c657274223a226c6976652031222c22637265617465645f6174223a22323032362d31322d30365431363a33323a31322e3939345a227d	1796574733086
com.example.live	erin	2	00000000000000000000000000000000000000000000000000000000000000e1	01a24c33-29b2-7a9a-87a8-64204c95236a	\\x7b226964223a2230316132346333332d323962322d376139612d383761382d363432303463393532333661222c22617070223a22636f6d2e6578616d706c652e6c697665222c22616c657274223a226c6976652032222c22637265617465645f6174223a22323032362d31322d30365431363a33323a33312e3135345a227d	1796574751230
com.example.live	erin	3	00000000000000000000000000000000000000000000000000000000000000e1	01a24c33-5929-70b4-a5e3-04450ec0af6b	\\x7b226964223a2230316132346333332d353932392d373062342d613565332d303434353065633061663662222c22617070223a22636f6d2e6578616d706c652e6c697665222c22616c657274223a226c6976652033222c22637265617465645f6174223a22323032362d31322d30365431363a33323a34332e3330365a227d	1796574763336
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
1	01a24c32-e2c2-7f06-a18e-f66aedabb07c	com.example.live	com.example.live	{"body":"live 1"}	\N	1	1796574732994
2	01a24c33-29b2-7a9a-87a8-64204c95236a	com.example.live	com.example.live	{"body":"live 2"}	\N	1	1796574751154
3	01a24c33-5929-70b4-a5e3-04450ec0af6b	com.example.live	com.example.live	{"body":"live 3"}	\N	1	1796574763306
4	01a24c33-7161-77b9-b5e9-fecafed44ef1	com.example.live	com.example.live	{"body":"parked erin 1"}	\N	1	1796574769506
5	01a24c33-8bde-7c3c-adc2-d4b53921b7d1	com.example.live	com.example.live	{"body":"parked frank 1"}	\N	1	1796574776286
6	01a24c33-9a72-73c8-97fb-551e5a601a50	com.example.live	com.example.live	{"body":"parked erin 2"}	\N	1	1796574780019
7	01a24c33-b7ef-7fde-89f9-16469e281e65	com.example.live	com.example.live	{"body":"parked frank 2"}	\N	1	1796574787568
8	01a24c33-c55e-7e70-a7c2-f490b7126685	com.example.app	com.example.app	{"body":"to everyone"}	\N	4	1796574791006
9	01a24c33-d8bd-75e0-9f38-b10811f29950	com.example.app	com.example.app	{"body":"once"}	upgrade-fixture-key-1	2	1796574795962
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
-- Name: deliveries_parked_stream; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX deliveries_parked_stream ON public.deliveries USING btree (transport, stream_device) WHERE parked;


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

\unrestrict pICj7lZQcPJGCME9d7PLvsRJb9a0Ccg6o8jjvt7gg2siQ08evaYsJyxiEBaWr7Z

