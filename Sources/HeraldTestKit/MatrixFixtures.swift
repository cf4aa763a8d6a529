/// Matrix Push Gateway API requests shared by the core's and the server's tests.
public enum MatrixFixtures {
    /// The specification's example `POST /_matrix/push/v1/notify` body (its pushkey is base64 of
    /// "Why on earth did you decode this?").
    public static let specExample = """
    {"notification": {"event_id": "$3957tyerfgewrf384", "room_id": "!slw48wfj34rtnrf:example.com", "type": "m.room.message",
      "sender": "@exampleuser:matrix.org", "sender_display_name": "Major Tom", "room_name": "Mission Control",
      "room_alias": "#exampleroom:matrix.org", "prio": "high",
      "content": {"msgtype": "m.text", "body": "I'm floating in a most peculiar way."},
      "counts": {"unread": 2, "missed_calls": 1},
      "devices": [{"app_id": "org.matrix.matrixConsole.ios", "pushkey": "V2h5IG9uIGVhcnRoIGRpZCB5b3UgZGVjb2RlIHRoaXM/",
                   "pushkey_ts": 12345678, "data": {}, "tweaks": {"sound": "bing"}}]}}
    """
}
