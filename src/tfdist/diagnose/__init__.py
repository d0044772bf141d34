"""Who is slow, who is lost? Lost peers and collectives that no longer meet (peers), steps that turn slow
(slowness), the link between two nodes measured (link) and read (linkreport)."""
