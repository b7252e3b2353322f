"""Words dropped from search queries: they match nearly every chunk and only add noise to BM25.

English function words (the usual NLTK list) plus a few words that questions are made of
("what did … say about …"). A query made only of these has nothing to search for.
"""

STOPWORDS = frozenset(
    """
a about above after again against all am an and any are aren't as at be because been before being below
between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during
each few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here here's
hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself
let's me more most mustn't my myself no nor not of off on once only or other ought our ours ourselves
out over own same shan't she she'd she'll she's should shouldn't so some such than that that's the
their theirs them themselves then there there's these they they'd they'll they're they've this those
through to too under until up very was wasn't we we'd we'll we're we've were weren't what what's when
when's where where's which while who who's whom why why's will with won't would wouldn't you you'd
you'll you're you've your yours yourself yourselves
s t d ll m o re ve y don aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn
wasn weren won wouldn also just ever yet us may might must shall does tell told say said
""".split()
)

# Stopwords that are also month names: kept when the query uses them as one ("25 May, 2022").
DATE_STOPWORDS = frozenset({"may"})

# Words that say a question asks about the present ("Where do I live now?", "my current role", "these
# days"), not what it is about: left out of the words searched — they matched every "now" of the memory
# — unless nothing else is left. search/timeline.py reads the question's time from them. (Words of the
# past — "first", "old", "originally" — stay: "his first two turtles" is what a question is about.)
TIME_WORDS = frozenset(
    """
now nowadays currently current days still anymore moment today lately recently latest
""".split()
)
