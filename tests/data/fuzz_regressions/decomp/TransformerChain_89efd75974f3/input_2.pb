BresJ`:*zDêäyDOÚyD)zDLzD§zDÀùyD9ñyDø"zDµzD÷zDäÐyDÞzD‹=zD-ßyDœ	zD/zDÐ<zD1
zDï"zDÃöyDæzDíëyD¯ÙyD