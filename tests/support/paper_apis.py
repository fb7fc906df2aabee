"""What arXiv's Atom export API (FEED) and NCBI's E-utilities (ESEARCH, EFETCH) answer, for the ArXiv and
PubMed tools' tests: one arXiv paper, two PubMed articles."""
from __future__ import annotations

FEED = """<?xml version="1.0" encoding="UTF-8"?>
<feed xmlns="http://www.w3.org/2005/Atom" xmlns:arxiv="http://arxiv.org/schemas/atom">
  <title type="html">ArXiv Query: search_query=all:rag</title>
  <entry>
    <id>http://arxiv.org/abs/2401.00001v1</id>
    <updated>2024-01-02T00:00:00Z</updated><published>2024-01-01T00:00:00Z</published>
    <title>Retrieval-Augmented
      Generation at Scale</title>
    <summary>  We study retrieval for large models.
</summary>
    <author><name>Ada Lovelace</name></author><author><name>Alan Turing</name></author>
    <link href="http://arxiv.org/abs/2401.00001v1" rel="alternate" type="text/html"/>
    <link title="pdf" href="http://arxiv.org/pdf/2401.00001v1" rel="related" type="application/pdf"/>
  </entry>
</feed>"""

ESEARCH = """<?xml version="1.0" encoding="UTF-8" ?>
<!DOCTYPE eSearchResult PUBLIC "-//NLM//DTD esearch 20060628//EN" "https://eutils.ncbi.nlm.nih.gov/eutils/dtd/20060628/esearch.dtd">
<eSearchResult><Count>2</Count><RetMax>2</RetMax><RetStart>0</RetStart>
<IdList><Id>38000001</Id><Id>38000002</Id></IdList></eSearchResult>"""

EFETCH = """<?xml version="1.0" ?>
<PubmedArticleSet>
<PubmedArticle><MedlineCitation Status="MEDLINE"><PMID Version="1">38000001</PMID>
<Article><Journal><JournalIssue><Volume>12</Volume><Issue>3</Issue></JournalIssue><Title>Nature Medicine</Title></Journal>
<ArticleTitle>CRISPR <i>in vivo</i> editing</ArticleTitle><Pagination><MedlinePgn>100-110</MedlinePgn></Pagination>
<Abstract><AbstractText>Editing works in mice.</AbstractText></Abstract>
<AuthorList><Author><LastName>Doudna</LastName><ForeName>Jennifer</ForeName></Author></AuthorList></Article>
</MedlineCitation><PubmedData><ArticleIdList><ArticleId IdType="pubmed">38000001</ArticleId>
<ArticleId IdType="doi">10.1000/nm.1</ArticleId></ArticleIdList></PubmedData></PubmedArticle>
<PubmedArticle><MedlineCitation><PMID>38000002</PMID><Article><Journal><Title>Cell</Title></Journal>
<ArticleTitle>Base editors</ArticleTitle></Article></MedlineCitation></PubmedArticle>
</PubmedArticleSet>"""
